/**
 * Error classes. Every error this package raises is a {@link MonolockError}
 * with a `code` (the wire code, or `null`) and a `temporary` flag.
 *
 * Branch on the class or on `code`, never on the message text.
 *
 * @packageDocumentation
 */

import { ERRORS } from "./constants.gen.js";
import * as generated from "./errors.gen.js";
import {
  canonicalText,
  type ErrorOrigin,
  MonolockError,
  type MonolockErrorOptions,
  ServerError,
} from "./server-error.js";
import { type CertificateSide, certificateHint } from "./tlscert.js";

// The class of each code (ShuttingDownError, ...) is generated from
// spec/errors.json; the base classes are in server-error.ts.
export * from "./errors.gen.js";
export type { ErrorOrigin, MonolockErrorOptions } from "./server-error.js";
export { canonicalText, isTemporaryCode, MonolockError, ServerError } from "./server-error.js";

type CodeClass = (typeof generated)[keyof typeof generated];

/** Every generated class, keyed by its `CODE`. */
const CLASSES: ReadonlyMap<number, CodeClass> = new Map(Object.values(generated).map((cls) => [cls.CODE, cls]));

/** Known wire codes with their spec name and canonical text. */
export function knownCodes(): { code: number; name: string; text: string }[] {
  return ERRORS.codes.map(({ code, name, text }) => ({ code, name, text }));
}

/**
 * Builds the error for a wire code: the matching subclass for a known code,
 * a plain {@link ServerError} for an unknown one.
 */
export function errorForCode(code: number, reason = "", origin: ErrorOrigin = "server"): ServerError {
  const cls = CLASSES.get(code) ?? ServerError;
  return new cls(code, reason, origin);
}

/**
 * The server answered a shared claim (a protocol version 2 ACQUIRE) with
 * ERROR 0x10: it speaks protocol version 1 only, which has exclusive locks
 * alone. Terminal, never retried: use an exclusive lock, or upgrade the
 * server. A subclass of {@link UnsupportedVersionError} (`code` 0x10,
 * `reason` the server's), so code that handles that error still does.
 */
export class SharedUnsupportedError extends generated.UnsupportedVersionError {
  override name = "SharedUnsupportedError";
  /** The server, as `host:port`. */
  readonly address: string;
  /** @internal */
  constructor(address: string, reason = "") {
    super(generated.UnsupportedVersionError.CODE, reason, "server");
    this.address = address;
    this.message = unsupportedMessage(address, "shared locks or semaphores", 2, "use an exclusive lock");
  }
}

/** The message of a feature the server's protocol version lacks. */
function unsupportedMessage(address: string, what: string, version: number, instead: string): string {
  return (
    `monolock: server ${address} does not support ${what} ` +
    `(it answered a protocol version ${version} ACQUIRE with 0x10 unsupported protocol version); ` +
    `${instead}, or upgrade the server`
  );
}

/**
 * The server answered a claim with a value (a protocol version 3 ACQUIRE)
 * with ERROR 0x10: it predates values. Terminal, never retried: no earlier
 * protocol version can carry a value, so claim without one, or upgrade the
 * server. A subclass of {@link UnsupportedVersionError} (`code` 0x10,
 * `reason` the server's), so code that handles that error still does.
 */
export class ValueUnsupportedError extends generated.UnsupportedVersionError {
  override name = "ValueUnsupportedError";
  /** The server, as `host:port`. */
  readonly address: string;
  /** @internal */
  constructor(address: string, reason = "") {
    super(generated.UnsupportedVersionError.CODE, reason, "server");
    this.address = address;
    this.message = unsupportedMessage(address, "claims with a value", 3, "claim without a value");
  }
}

/**
 * The server answered SESSION (protocol version 4) with an ERROR that says
 * it predates sessions: 0x13 (an older server reads SESSION's type byte as
 * an unknown message), 0x10 or 0x11. Terminal, never retried: take each
 * claim on its own connection (`client.acquire`), or upgrade the server. A
 * subclass of {@link UnsupportedVersionError}; `code` is the code the
 * server sent, `reason` its reason.
 */
export class SessionUnsupportedError extends generated.UnsupportedVersionError {
  override name = "SessionUnsupportedError";
  /** The server, as `host:port`. */
  readonly address: string;
  /** @internal */
  constructor(address: string, code: number = generated.UnsupportedVersionError.CODE, reason = "") {
    super(code, reason, "server");
    this.address = address;
    const hex = `0x${code.toString(16).padStart(2, "0")}`;
    this.message =
      `monolock: server ${address} does not support sessions (it answered a protocol version 4 SESSION ` +
      `with ${hex} ${canonicalText(code)}); take each claim on its own connection, or upgrade the server`;
  }
}

/**
 * `lock.proclaim()` on a lock claimed without a value: its ACQUIRE was
 * protocol version 1 or 2, whose connection has no PROCLAIM (the server
 * would end the session). Raised before anything is sent; the lock stays
 * held. Not temporary: claim with the `value` option to proclaim.
 */
export class NoValueError extends MonolockError {
  override name = "NoValueError";
  /** The lock name. */
  readonly lockName: string;
  /** @internal */
  constructor(lockName: string) {
    const quoted = JSON.stringify(lockName);
    super(`monolock: lock ${quoted} was claimed without a value (use the value option to proclaim)`, null, false);
    this.lockName = lockName;
  }
}

/** What a claim asked for, for {@link LockBusyError}: exclusive unless `shared`; `limit` 0 is no bound. */
export interface BusyClaim {
  readonly shared: boolean;
  readonly limit: number;
}

/**
 * `tryAcquire` found no room for its claim. The message says what kept it
 * out, in the words of every client (spec/vectors/messages.json, busy):
 * `monolock: lock "jobs/nightly" is held by another session`, or for a
 * semaphore `monolock: all 2 permits of "pool/gpu" are taken`. Temporary.
 */
export class LockBusyError extends MonolockError {
  override name = "LockBusyError";
  /** The lock name that was busy. */
  readonly lockName: string;
  /** Whether the claim was shared. */
  readonly shared: boolean;
  /** The claim's semaphore limit; 0 for none (and for an exclusive claim). */
  readonly limit: number;
  /** @internal */
  constructor(lockName: string, claim: BusyClaim = { shared: false, limit: 0 }) {
    super(busyMessage(lockName, claim), null, true);
    this.lockName = lockName;
    this.shared = claim.shared;
    this.limit = claim.limit;
  }
}

/**
 * Who can keep a claim out: anyone, for an exclusive one; every permit's
 * holder (an exclusive one takes them all), for a semaphore; only an
 * exclusive holder (or claim queued first), for a shared claim without one.
 */
function busyMessage(lockName: string, { shared, limit }: BusyClaim): string {
  const quoted = JSON.stringify(lockName);
  if (!shared) return `monolock: lock ${quoted} is held by another session`;
  if (limit === 1) return `monolock: the 1 permit of ${quoted} is taken`;
  if (limit > 1) return `monolock: all ${limit} permits of ${quoted} are taken`;
  return `monolock: lock ${quoted} is held exclusively by another session`;
}

/**
 * The acquisition's `timeoutMs` passed before the lock was granted. `cause`
 * holds the last failure while retrying, if there was one, and the message
 * says what it was (a server that is down is not a busy lock). The message
 * names the lock, in the words of every client (spec/vectors/messages.json):
 * `monolock: timed out waiting for the lock "jobs/nightly" (last attempt:
 * server shutting down (0x01))`. Temporary.
 */
export class AcquireTimeoutError extends MonolockError {
  override name = "AcquireTimeoutError";
  /** The lock name that was waited for. */
  readonly lockName: string;
  /** @internal */
  constructor(lockName: string, options?: MonolockErrorOptions) {
    const last = options?.cause instanceof Error ? ` (last attempt: ${withoutPrefix(options.cause.message)})` : "";
    super(`monolock: timed out waiting for the lock ${JSON.stringify(lockName)}${last}`, null, true, options);
    this.lockName = lockName;
  }
}

/** The caller's AbortSignal aborted the acquisition; `cause` is the signal's reason. */
export class AcquireAbortedError extends MonolockError {
  override name = "AcquireAbortedError";
  /** @internal */
  constructor(options?: MonolockErrorOptions) {
    super("monolock: acquisition aborted", null, false, options);
  }
}

/**
 * The connection could not be opened (TCP, TLS handshake, connect timeout),
 * failed, ended, or carried bytes that break the protocol. Temporary, except
 * for its subclass {@link NotMonolockError}.
 */
export class ConnectionError extends MonolockError {
  override name = "ConnectionError";
  /** `"connect"`: no connection was made; `"open"`: it failed after opening. */
  readonly phase: ConnectionPhase;
  /** @internal */
  constructor(message: string, phase: ConnectionPhase, options?: MonolockErrorOptions, temporary = true) {
    super(`monolock: ${message}`, null, temporary, options);
    this.phase = phase;
  }
}

/**
 * The server ended the session with an ERROR whose code had not arrived when
 * its type byte was read. An ERROR is the last message of a session, so the
 * session ends at that byte and the client does not wait for the rest.
 * Without a code there is no class (`code` is null): a waiting acquisition
 * queues again, as after a dropped connection.
 */
export class ServerEndedError extends ConnectionError {
  override name = "ServerEndedError";
  /** @internal */
  constructor(message: string) {
    super(message, "open");
  }
}

/** How many of a wrong server's first bytes a {@link NotMonolockError} quotes. */
const NOT_MONOLOCK_QUOTE_LEN = 12;

/**
 * The server's first bytes start no monolock message: the address is some
 * other service (an HTTP port such as the admin port 7118, a TLS server
 * spoken to without `tls`). A protocol error, raised at once rather than
 * after a timeout; an acquisition does not ask that server again, and gives
 * up when no other server is left. Not temporary: the address is wrong.
 */
export class NotMonolockError extends ConnectionError {
  override name = "NotMonolockError";
  /** The server, as `host:port`. */
  readonly address: string;
  /** Up to the first 12 bytes it sent. */
  readonly sent: Uint8Array;
  /** @internal */
  constructor(address: string, sent: Uint8Array) {
    const first = sent.subarray(0, NOT_MONOLOCK_QUOTE_LEN);
    const http = String.fromCharCode(...first).startsWith("HTTP/") ? "; is this the admin port?" : "";
    const quoted = quoteBytes(sent, NOT_MONOLOCK_QUOTE_LEN);
    super(`${address} does not speak the monolock protocol (it sent "${quoted}")${http}`, "open", undefined, false);
    this.address = address;
    this.sent = Uint8Array.from(first);
  }
}

/**
 * The TLS handshake failed on a certificate: this client refused the
 * server's (`side: "server"`: an unknown CA, self-signed, expired, a name
 * it does not cover) or the server refused this client's (`side:
 * "client"`: a TLS alert such as certificate_required or unknown_ca, which
 * TLS 1.3 delivers on the first read after the handshake). It would fail
 * the same way again, so an acquisition does not ask that server again and
 * gives up at once when no other server is left, instead of retrying until
 * its deadline. `cause` is the TLS error. Not temporary: the configuration
 * is wrong.
 */
export class CertificateError extends ConnectionError {
  override name = "CertificateError";
  /** The server, as `host:port`. */
  readonly address: string;
  /** Whose certificate was refused. */
  readonly side: CertificateSide;
  /** @internal */
  constructor(address: string, side: CertificateSide, detail: string, options?: MonolockErrorOptions) {
    super(`TLS handshake with ${address} failed: ${detail} (${certificateHint(side)})`, "connect", options, false);
    this.address = address;
    this.side = side;
  }
}

/**
 * Up to `limit` bytes for a message: printable ASCII as it is, other bytes
 * (and `\` and `"`, which would break the quoting) as `\xNN`, then an
 * ellipsis if cut.
 */
export function quoteBytes(bytes: Uint8Array, limit: number): string {
  let out = "";
  for (const b of bytes.subarray(0, limit)) {
    const plain = b >= 0x20 && b < 0x7f && b !== 0x5c && b !== 0x22;
    out += plain ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`;
  }
  return bytes.length > limit ? `${out}…` : out;
}

/** A wrapped cause's message without its own prefix: one "monolock: " per message. */
export function withoutPrefix(message: string): string {
  return message.startsWith("monolock: ") ? message.slice("monolock: ".length) : message;
}

/** When a {@link ConnectionError} happened. */
export type ConnectionPhase = "connect" | "open";

/** How a held lock was lost. */
export type LostKind = "server" | "timeout" | "io";

/**
 * A held lock was lost: the server sent an ERROR (`kind: "server"`, `code`
 * set, `cause` the {@link ServerError}), no heartbeat was acknowledged within
 * the client timeout (`"timeout"`), or the connection failed (`"io"`, `cause`
 * the {@link ConnectionError}). The client never re-acquires by itself.
 */
export class LockLostError extends MonolockError {
  override name = "LockLostError";
  /** What ended the lock. */
  readonly kind: LostKind;
  /** @internal */
  constructor(kind: LostKind, message: string, cause?: MonolockError) {
    super(
      `monolock: lock lost: ${withoutPrefix(message)}`,
      cause instanceof ServerError ? cause.code : null,
      cause?.temporary ?? true,
      { cause },
    );
    this.kind = kind;
  }
}

/** The reason of a lock's `signal` after `release()`: the lock no longer protects anything. */
export class LockReleasedError extends MonolockError {
  override name = "LockReleasedError";
  /** @internal */
  constructor() {
    super("monolock: lock released", null, false);
  }
}
