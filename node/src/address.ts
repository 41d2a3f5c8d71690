/** Parsing of server addresses ("host:port", "[v6]:port", "host"). */

import { DEFAULT_PORT } from "./constants.js";

/** A server to connect to. */
export interface ServerAddress {
  readonly host: string;
  readonly port: number;
}

/** Parses `"host:port"`, `"[::1]:7117"`, or a bare host (port 7117). */
export function parseAddress(address: string): ServerAddress {
  const bad = (): TypeError => new TypeError(`monolock: bad server address ${JSON.stringify(address)}`);
  let host: string;
  let portText: string | undefined;
  if (address.startsWith("[")) {
    const close = address.indexOf("]");
    if (close < 0) throw bad();
    host = address.slice(1, close);
    const rest = address.slice(close + 1);
    if (rest !== "") {
      if (!rest.startsWith(":")) throw bad();
      portText = rest.slice(1);
    }
  } else {
    const colon = address.lastIndexOf(":");
    if (colon >= 0 && address.indexOf(":") !== colon) {
      host = address; // a bare IPv6 address without brackets
    } else if (colon >= 0) {
      host = address.slice(0, colon);
      portText = address.slice(colon + 1);
    } else {
      host = address;
    }
  }
  if (host === "") throw bad();
  const port = portText === undefined ? DEFAULT_PORT : Number(portText);
  if (portText === "" || !Number.isInteger(port) || port < 1 || port > 65535) throw bad();
  return { host, port };
}
