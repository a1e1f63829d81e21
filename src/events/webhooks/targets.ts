/**
 * Where a webhook may send (docs/api.md §12, Targets): https URLs whose name
 * resolves only to public unicast addresses. The check runs on every attempt
 * inside the connection's own DNS lookup, and the connection goes to the
 * address that was checked: a name cannot pass the check and then resolve
 * elsewhere for the connection (DNS rebinding). WEBHOOK_ALLOW_HTTP and
 * WEBHOOK_ALLOW_PRIVATE lift the rules for tests and private networks.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

export interface TargetPolicy {
  allowHttp: boolean;
  allowPrivate: boolean;
}

/** IPv6 forms that carry an IPv4 address in their last 32 bits: compatible, mapped, translated (RFC 6145, RFC 6052). */
const CARRIERS = ['::/96', '::ffff:0:0/96', '::ffff:0:0:0/96', '64:ff9b::/96'].map((cidr) =>
  ipaddr.IPv6.parseCIDR(cidr),
);

/** Why an address is refused (its range: private, loopback, linkLocal...), or undefined for a public one. */
export function refusedRange(address: string): string | undefined {
  if (!ipaddr.isValid(address)) return 'invalid';
  let ip = ipaddr.parse(address);
  if (
    ip instanceof ipaddr.IPv6 &&
    !['loopback', 'unspecified'].includes(ip.range()) &&
    CARRIERS.some((c) => ip.match(c))
  ) {
    const [, , , , , , high, low] = ip.parts as number[];
    ip = new ipaddr.IPv4([high! >> 8, high! & 255, low! >> 8, low! & 255]);
  }
  const range = ip.range();
  return range === 'unicast' ? undefined : range;
}

/** A literal address in a URL's hostname, without IPv6 brackets; undefined for a name. */
function literalAddress(hostname: string): string | undefined {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return ipaddr.isValid(bare) ? bare : undefined;
}

/** Ports no webhook goes to: 0, and the Fetch standard's bad ports (SSH, SMTP, IRC...). */
const BAD_PORTS = new Set([
  0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110,
  111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532,
  540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061,
  6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);
/** What WHATWG URL would otherwise repair silently: a scheme not followed by exactly two slashes, spaces, controls. */
// eslint-disable-next-line no-control-regex -- refusing control characters is the point
const WELL_FORMED = /^[a-z][a-z0-9+.-]*:\/\/[^/\\\x00-\x20\x7f][^\\\x00-\x20\x7f]*$/i;

/** The URL as stored and sent: WHATWG URL's serialization (lower-case host, default port dropped, IDN in punycode). */
export const normalizedUrl = (url: string) => new URL(url).href;

/** What is wrong with `url` as a webhook target, before any DNS; undefined when nothing is. */
export function urlProblem(url: string, policy: TargetPolicy): string | undefined {
  if (!URL.canParse(url)) return 'must be an absolute URL';
  if (!WELL_FORMED.test(url)) return 'must be a well-formed absolute URL';
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:' && !(policy.allowHttp && parsed.protocol === 'http:')) {
    return policy.allowHttp ? 'must be an http or https URL' : 'must be an https URL';
  }
  if (parsed.username || parsed.password)
    return 'must not hold a user name or password (deliveries are signed instead)';
  if (parsed.hash) return 'must not hold a fragment';
  const port = Number(parsed.port);
  if (parsed.port !== '' && BAD_PORTS.has(port))
    return port === 0
      ? 'must not use port 0'
      : `must not use port ${port} (not an HTTP port: the Fetch standard's bad ports)`;
  const literal = literalAddress(parsed.hostname);
  if (literal !== undefined && !policy.allowPrivate) {
    const range = refusedRange(literal);
    if (range) return `must not name a ${range} address`;
  }
  return undefined;
}

export class RefusedTarget extends Error {
  override name = 'RefusedTarget';
}

/**
 * A DNS lookup for the connection that refuses names resolving to any
 * non-public address (all of them are checked: a name with one private
 * address among public ones is refused, whichever the connection would pick).
 */
export function guardedLookup(policy: TargetPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      const refused = policy.allowPrivate ? undefined : addresses.find((a) => refusedRange(a.address) !== undefined);
      if (refused) {
        const range = refusedRange(refused.address)!;
        return callback(new RefusedTarget(`${hostname} resolves to ${refused.address}, a ${range} address`), '', 0);
      }
      if (addresses.length === 0) return callback(new RefusedTarget(`${hostname} resolves to no address`), '', 0);
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

/** The check the lookup cannot make: a literal address in the URL connects without a lookup. */
export function literalProblem(url: URL, policy: TargetPolicy): string | undefined {
  const literal = literalAddress(url.hostname);
  if (literal === undefined || policy.allowPrivate) return undefined;
  const range = refusedRange(literal);
  return range ? `${literal} is a ${range} address` : undefined;
}
