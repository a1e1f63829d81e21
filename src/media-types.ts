/**
 * The media types the API speaks (docs/api.md): JSON in UTF-8 both ways.
 * A request may name UTF-8 in any spelling clients use (RFC 8259 §8.1 makes
 * UTF-8 the only charset of JSON; the IANA registry lists "UTF-8" with the
 * alias "csUTF8", and "utf8" is what many libraries send).
 */
export const JSON_MEDIA_TYPE = 'application/json; charset=utf-8';

/** What a body may be sent as; a PATCH body may also come as a JSON merge patch (RFC 7396), which it is anyway. */
export const PATCH_MEDIA_TYPES = ['application/json', 'application/merge-patch+json'];

const UTF8_NAMES = new Set(['utf-8', 'utf8', 'csutf8']);

const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** One `OWS ";" OWS [ name "=" ( token / quoted-string ) ]` (RFC 9110 §5.6.6; empty parameters are allowed; Node refuses control characters in headers). */
const PARAMETER = new RegExp(`[ \\t]*;[ \\t]*(?:(${TOKEN})=(?:(${TOKEN})|"((?:[^"\\\\]|\\\\.)*)"))?`, 'y');

/**
 * A Content-Type's parameters, names lower-cased, quoted values unquoted
 * (`charset="UTF-8"` → charset: UTF-8); undefined when one is malformed or a
 * name comes twice (RFC 6838 §4.3), which leaves no single reading of the header.
 */
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

/** No charset, or one that names UTF-8. */
export const isUtf8 = (charset: string | undefined) => charset === undefined || UTF8_NAMES.has(charset.toLowerCase());
