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

/** A media type's parameters as sent: `charset="UTF-8"` → utf-8 (names are case-insensitive, values may be quoted). */
export function charsetOf(contentType: string): string | undefined {
  for (const parameter of contentType.split(';').slice(1)) {
    const match = /^\s*charset\s*=\s*(?:"([^"]*)"|([^\s"]*))\s*$/i.exec(parameter);
    if (match) return (match[1] ?? match[2] ?? '').toLowerCase();
  }
  return undefined;
}

/** No charset, or one that names UTF-8. */
export const isUtf8 = (charset: string | undefined) => charset === undefined || UTF8_NAMES.has(charset);
