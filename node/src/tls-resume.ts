/**
 * TLS session resumption for claims on connections of their own. A
 * {@link Client} keeps the latest TLS session (with TLS 1.3, the latest
 * ticket, which the server sends after the handshake) of each server, and
 * the next such connection to that server offers it: the server resumes the
 * session instead of a full handshake (no certificate sent and verified).
 *
 * @packageDocumentation
 */

import type * as tls from "node:tls";

/** The TLS sessions of one Client, by server address (`host:port`). @internal */
export class TlsSessions {
  private readonly latest = new Map<string, Buffer>();
  /** Handshakes completed by connections tracked here: full, and resumed (for tests). */
  full = 0;
  resumed = 0;

  /** The session to offer `address`, if one is kept. */
  get(address: string): Buffer | undefined {
    return this.latest.get(address);
  }

  /**
   * Keeps every session `socket` receives as `address`'s latest (attach
   * right after `tls.connect`: Node only asks OpenSSL for sessions while a
   * `session` listener exists), and counts the handshake once it is done.
   * A connection that fails before its handshake is done drops the kept
   * session: the next one starts afresh.
   */
  track(socket: tls.TLSSocket, address: string): void {
    let secured = false;
    socket.on("session", (session: Buffer) => this.latest.set(address, session));
    socket.once("secureConnect", () => {
      secured = true;
      if (socket.isSessionReused()) this.resumed++;
      else this.full++;
    });
    socket.once("error", () => {
      if (!secured) this.latest.delete(address);
    });
  }
}

const byOwner = new WeakMap<object, TlsSessions>();

/** The TLS sessions of `owner` (a Client), made on first use. @internal */
export function tlsSessionsOf(owner: object): TlsSessions {
  let sessions = byOwner.get(owner);
  if (sessions === undefined) {
    sessions = new TlsSessions();
    byOwner.set(owner, sessions);
  }
  return sessions;
}
