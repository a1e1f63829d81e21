/** Content-Type parameters and the charset rule of request bodies (src/media-types.ts, used by the body parser). */
import { describe, expect, it } from 'vitest';
import { isUtf8, parametersOf } from '../../src/media-types.js';

describe('parametersOf', () => {
  it('no parameters: an empty map', () => {
    expect(parametersOf('application/json')).toEqual(new Map());
    expect(parametersOf('application/json;')).toEqual(new Map());
  });

  it('names lower-cased, values as sent, quoted values unquoted and unescaped', () => {
    expect(parametersOf('application/json; Charset=UTF-8')).toEqual(new Map([['charset', 'UTF-8']]));
    expect(parametersOf('application/json;charset="utf-8" ; q=1')).toEqual(
      new Map([
        ['charset', 'utf-8'],
        ['q', '1'],
      ]),
    );
    expect(parametersOf('application/json; x="a \\"b\\" ;c"')).toEqual(new Map([['x', 'a "b" ;c']]));
  });

  it('empty parameters and trailing white space are allowed', () => {
    expect(parametersOf('application/json; ; charset=utf-8;\t ')).toEqual(new Map([['charset', 'utf-8']]));
  });

  it('undefined for a malformed or repeated parameter: no one reading of the header', () => {
    expect(parametersOf('application/json; charset=utf-8; charset=latin1')).toBeUndefined();
    expect(parametersOf('application/json; CHARSET=utf-8; charset=utf-8')).toBeUndefined();
    expect(parametersOf('application/json; charset="utf-8')).toBeUndefined();
    expect(parametersOf('application/json; charset')).toBeUndefined();
    expect(parametersOf('application/json; charset=utf 8')).toBeUndefined();
    expect(parametersOf('application/json; =utf-8')).toBeUndefined();
  });
});

describe('isUtf8', () => {
  it('no charset, or UTF-8 in any spelling and case', () => {
    for (const charset of [undefined, 'utf-8', 'UTF-8', 'utf8', 'UTF8', 'csUTF8'])
      expect(isUtf8(charset), String(charset)).toBe(true);
  });
  it('anything else is not', () => {
    for (const charset of ['latin1', 'iso-8859-1', 'utf-16', 'utf_8', '', 'utf-8 '])
      expect(isUtf8(charset), charset).toBe(false);
  });
});
