/** JSON in UTF-8 both ways; a request may spell UTF-8 as clients do ("utf8", "csUTF8"). */
export const JSON_MEDIA_TYPE = 'application/json; charset=utf-8';

/** A PATCH body is a JSON merge patch (RFC 7396) anyway. */
export const PATCH_MEDIA_TYPES = ['application/json', 'application/merge-patch+json'];

const UTF8_NAMES = new Set(['utf-8', 'utf8', 'csutf8']);

const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** `OWS ";" OWS [ name "=" ( token / quoted-string ) ]` (RFC 9110 §5.6.6). */
const PARAMETER = new RegExp(`[ \\t]*;[ \\t]*(?:(${TOKEN})=(?:(${TOKEN})|"((?:[^"\\\\]|\\\\.)*)"))?`, 'y');

/** undefined when one is malformed or a name comes twice: no single reading of the header. */
export function parametersOf(contentType: string): Map<string, string> | undefined {
  const start = contentType.indexOf(';');
  const parameters = new Map<string, string>();
  if (start < 0) return parameters;
  const rest = contentType.slice(start).replace(/[ \t]+$/, '');
  PARAMETER.lastIndex = 0;
  while (PARAMETER.lastIndex < rest.length) {
    const match = PARAMETER.exec(rest);
    if (!match || match[0] === '') return undefined;
    const [, name, token, quoted] = match;
    if (name === undefined) continue;
    const key = name.toLowerCase();
    if (parameters.has(key)) return undefined;
    parameters.set(key, token ?? quoted!.replace(/\\(.)/g, '$1'));
  }
  return parameters;
}

export const isUtf8 = (charset: string | undefined): boolean =>
  charset === undefined || UTF8_NAMES.has(charset.toLowerCase());
