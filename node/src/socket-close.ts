/**
 * How a client closes a connection of its own. On a TLS socket `end()`
 * sends close_notify before the FIN; `destroy()` sends neither and waits
 * for nothing.
 *
 * @packageDocumentation
 */

import type * as net from "node:net";
import { startTimer } from "./timers.js";

/**
 * Hands the connection back: FIN (with TLS, close_notify first), then waits
 * for the server to close its side, which it does only after letting go of
 * what the connection held, for at most `capMs`; then the socket is
 * destroyed. `closed` resolves on the socket's `close`.
 */
export function endAndAwaitPeer(socket: net.Socket, closed: Promise<void>, capMs: number): void {
  socket.end();
  const cap = startTimer(capMs, () => socket.destroy(), false);
  void closed.then(() => cap.cancel());
}

/**
 * Closes at once, without waiting for the server (a claim given up, lost,
 * refused or broken). A TLS connection whose handshake is done (`secured`)
 * still ends as TLS says: close_notify and FIN are written first, for at
 * most `capMs` (a peer that reads nothing must not keep the socket), then
 * the socket is destroyed. Anything else (plain TCP, a handshake not done,
 * a socket already gone) is destroyed at once, as before.
 */
export function closeCleanly(socket: net.Socket, secured: boolean, capMs: number): void {
  if (!secured || socket.destroyed || socket.writableFinished) {
    socket.destroy();
    return;
  }
  const cap = startTimer(capMs, () => socket.destroy(), false);
  socket.end(() => {
    cap.cancel();
    socket.destroy();
  });
}
