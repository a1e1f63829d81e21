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

/** Why an address is refused (its range: private, loopback, linkLocal...), or undefined for a public one. */
export function refusedRange(address: string): string | undefined {
  if (!ipaddr.isValid(address)) return 'invalid';
  // An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is judged as the IPv4 address it carries.
  const range = ipaddr.process(address).range();
  return range === 'unicast' ? undefined : range;
}

/** A literal address in a URL's hostname, without IPv6 brackets; undefined for a name. */
function literalAddress(hostname: string): string | undefined {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return ipaddr.isValid(bare) ? bare : undefined;
}

/** What is wrong with `url` as a webhook target, before any DNS; undefined when nothing is. */
export function urlProblem(url: string, policy: TargetPolicy): string | undefined {
  if (!URL.canParse(url)) return 'must be an absolute URL';
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:' && !(policy.allowHttp && parsed.protocol === 'http:')) {
    return policy.allowHttp ? 'must be an http or https URL' : 'must be an https URL';
  }
  if (parsed.username || parsed.password)
    return 'must not hold a user name or password (deliveries are signed instead)';
  if (parsed.hash) return 'must not hold a fragment';
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
