/**
 * Parsing of server addresses: "host:port", "[v6]:port", or a bare host
 * ("host", "[v6]" or an IPv6 literal without brackets), which means port
 * 7117. `spec/vectors/addresses.json` runs the rule.
 */

import { isIPv6 } from "node:net";
import { DEFAULT_PORT } from "./constants.js";

/** A server to connect to. */
export interface ServerAddress {
  readonly host: string;
  readonly port: number;
}

/** Letters, digits, dots, hyphens, underscores: host names and IPv4 literals. */
const HOST_NAME = /^[\p{L}\p{N}._-]+$/u;

/**
 * Parses one address. Throws a `TypeError` naming the address and what is
 * wrong with it: a configuration error, never worth retrying.
 */
export function parseAddress(address: string): ServerAddress {
  // "monolock: server address "X": " starts every address error, as in the
  // other clients.
  const bad = (why: string): TypeError => new TypeError(`monolock: server address ${JSON.stringify(address)}: ${why}`);
  if (typeof address !== "string") throw new TypeError("monolock: a server address must be a string");
  // A URL ("http://host:port") is the commonest wrong address: say what to
  // drop (spec/vectors/addresses.json messages, the same text in every client).
  const scheme = address.indexOf("://");
  if (scheme >= 0) throw bad(`drop the scheme ${JSON.stringify(address.slice(0, scheme + 3))}; give HOST:PORT`);
  let host: string;
  let portText: string | undefined;
  if (address.startsWith("[")) {
    const close = address.indexOf("]");
    if (close < 0) throw bad('missing "]"');
    host = address.slice(1, close);
    if (!isIPv6(host)) throw bad("only an IPv6 address goes in brackets");
    const rest = address.slice(close + 1);
    if (rest !== "") {
      if (!rest.startsWith(":")) throw bad('expected ":PORT" after "]"');
      portText = rest.slice(1);
    }
  } else if (isIPv6(address)) {
    host = address; // an IPv6 literal without brackets has no port
  } else {
    const colon = address.indexOf(":");
    host = colon < 0 ? address : address.slice(0, colon);
    portText = colon < 0 ? undefined : address.slice(colon + 1);
    // Refused, not taken as localhost (spec/vectors/addresses.json).
    if (host === "") throw bad("no host (an empty host is not taken as localhost); give HOST:PORT");
    if (!HOST_NAME.test(host)) throw bad("the host has characters a host name cannot have");
  }
  if (portText === undefined) return { host, port: DEFAULT_PORT };
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
  if (!(port >= 1 && port <= 65535)) throw bad("the port must be a number from 1 to 65535");
  return { host, port };
}

/** The address as text, brackets around an IPv6 host. */
export function formatAddress({ host, port }: ServerAddress): string {
  return isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * The index in `servers` of the server an ERROR 0x03's reason names, or
 * `undefined` (spec/vectors/retry.json, leader_names). The reason is parsed
 * as a server address is; the host is compared without regard to ASCII
 * case, the port exactly. Nothing is resolved, so only an address the
 * client was given can be named: a passive server never sends it elsewhere.
 */
export function leaderIndex(servers: readonly ServerAddress[], reason: string): number | undefined {
  let named: ServerAddress;
  try {
    named = parseAddress(reason);
  } catch {
    return undefined; // the canonical text, or no address at all
  }
  const host = asciiLower(named.host);
  const index = servers.findIndex((s) => s.port === named.port && asciiLower(s.host) === host);
  return index < 0 ? undefined : index;
}

/** Lower case for A-Z only: host names compare so, and other letters stay as they are. */
function asciiLower(text: string): string {
  return text.replace(/[A-Z]/g, (c) => c.toLowerCase());
}
