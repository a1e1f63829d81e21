/**
 * Where a webhook may send (docs/api.md §12, Targets): https URLs whose name resolves only to public unicast
 * addresses, checked inside the connection's own DNS lookup so that the name cannot resolve elsewhere after the check.
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

/** The range of a refused address (private, loopback...); undefined for a public one. */
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

/** What WHATWG URL would otherwise repair silently: a scheme not followed by exactly two slashes, spaces, controls. */
// eslint-disable-next-line no-control-regex -- refusing control characters is the point
const WELL_FORMED = /^[a-z][a-z0-9+.-]*:\/\/[^/\\\x00-\x20\x7f][^\\\x00-\x20\x7f]*$/i;

/** As stored and sent: WHATWG URL's serialization. */
export const normalizedUrl = (url: string): string => new URL(url).href;

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
  // Nothing can be connected to on port 0.
  if (parsed.port === '0') return 'must not use port 0';
  const literal = refusedLiteral(parsed, policy);
  return literal && `must not name a ${literal.range} address`;
}

export class RefusedTarget extends Error {
  override name = 'RefusedTarget';
}

/** Refuses a name with any non-public address, whichever one the connection would pick. */
export function guardedLookup(policy: TargetPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      for (const { address } of policy.allowPrivate ? [] : addresses) {
        const range = refusedRange(address);
        if (range) return callback(new RefusedTarget(`${hostname} resolves to ${address}, a ${range} address`), '', 0);
      }
      if (addresses.length === 0) return callback(new RefusedTarget(`${hostname} resolves to no address`), '', 0);
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

/** The check the lookup cannot make: a literal address in the URL connects without a lookup. */
export function refusedLiteral(url: URL, policy: TargetPolicy): { address: string; range: string } | undefined {
  const address = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const range = policy.allowPrivate || !ipaddr.isValid(address) ? undefined : refusedRange(address);
  return range === undefined ? undefined : { address, range };
}
