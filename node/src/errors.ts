/**
 * Error classes. Every error this package raises is a {@link MonolockError}
 * with a `code` (the wire code, or `null`) and a `temporary` flag.
 *
 * Branch on the class or on `code`, never on the message text.
 *
 * @packageDocumentation
 */

import { FIRST_TERMINAL_CODE } from "./constants.js";

/** Options shared by the constructors of every monolock error. */
export interface MonolockErrorOptions {
  /** The underlying error, if any (kept as the standard `cause`). */
  cause?: unknown;
}

/**
 * Base class of every error raised by this package.
 *
 * `temporary` tells whether trying again (a new acquisition, possibly later)
 * may succeed. It never means the client retried or will retry by itself.
 */
export class MonolockError extends Error {
  override name = "MonolockError";
  /** The protocol's ERROR code, or `null` when the error has none. */
  readonly code: number | null;
  /** Whether a later attempt may succeed. */
  readonly temporary: boolean;

  /** @internal */
  constructor(message: string, code: number | null, temporary: boolean, options?: MonolockErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.temporary = temporary;
  }
}

/** Where a {@link ServerError} came from. */
export type ErrorOrigin = "server" | "client";

/**
 * An error with a protocol ERROR code: either received in an ERROR frame
 * (`origin: "server"`) or raised by this client before sending anything,
 * because the server would have answered with exactly this code
 * (`origin: "client"`, see the validation rules).
 *
 * Codes this version does not know are raised as a plain `ServerError`,
 * `temporary` when the code is below 0x10.
 */
export class ServerError extends MonolockError {
  override name = "ServerError";
  /** The wire code (always set for this class). */
  declare readonly code: number;
  /**
   * The reason text from the ERROR frame; for a check before sending, what
   * was wrong (such as the name's length and the limit); else the canonical
   * text of the code.
   */
  readonly reason: string;
  /** `"server"` for an ERROR frame, `"client"` for a check before sending. */
  readonly origin: ErrorOrigin;

  /** Creates an error for `code`; prefer {@link errorForCode} to get the right subclass. */
  constructor(code: number, reason = "", origin: ErrorOrigin = "server", options?: MonolockErrorOptions) {
    const text = reason !== "" ? reason : (canonicalText(code) ?? "unknown error");
    super(`monolock: ${text} (${hexCode(code)})`, code, isTemporaryCode(code), options);
    this.reason = reason !== "" ? reason : (canonicalText(code) ?? "");
    this.origin = origin;
  }
}

/** 0x01: the server is shutting down. Temporary. */
export class ShuttingDownError extends ServerError {
  override name = "ShuttingDownError";
  /** The wire code of this class. */
  static readonly CODE = 0x01;
}
/** 0x02: an administrator closed the session. Temporary. */
export class AdminClosedError extends ServerError {
  override name = "AdminClosedError";
  /** The wire code of this class. */
  static readonly CODE = 0x02;
}
/** 0x10: the server does not speak this protocol version. Terminal. */
export class UnsupportedVersionError extends ServerError {
  override name = "UnsupportedVersionError";
  /** The wire code of this class. */
  static readonly CODE = 0x10;
}
/** 0x11: the first message was not ACQUIRE (a client bug). Terminal. */
export class ExpectedAcquireError extends ServerError {
  override name = "ExpectedAcquireError";
  /** The wire code of this class. */
  static readonly CODE = 0x11;
}
/** 0x12: a second ACQUIRE on one connection (a client bug). Terminal. */
export class DuplicateAcquireError extends ServerError {
  override name = "DuplicateAcquireError";
  /** The wire code of this class. */
  static readonly CODE = 0x12;
}
/** 0x13: an unknown message type reached the server. Terminal. */
export class UnknownMessageError extends ServerError {
  override name = "UnknownMessageError";
  /** The wire code of this class. */
  static readonly CODE = 0x13;
}
/** 0x14: the lock name is empty. Terminal; raised before sending. */
export class EmptyNameError extends ServerError {
  override name = "EmptyNameError";
  /** The wire code of this class. */
  static readonly CODE = 0x14;
}
/** 0x15: the lock name is over 255 bytes of UTF-8. Terminal; raised before sending. */
export class NameTooLongError extends ServerError {
  override name = "NameTooLongError";
  /** The wire code of this class. */
  static readonly CODE = 0x15;
}
/** 0x16: the lock name is not valid UTF-8. Terminal; raised before sending. */
export class NameNotUtf8Error extends ServerError {
  override name = "NameNotUtf8Error";
  /** The wire code of this class. */
  static readonly CODE = 0x16;
}
/** 0x17: the lease is outside 1..4294967295 ms. Terminal; raised before sending. */
export class InvalidLeaseError extends ServerError {
  override name = "InvalidLeaseError";
  /** The wire code of this class. */
  static readonly CODE = 0x17;
}
/** 0x18: this identity may not take this lock name. Terminal. */
export class NotAuthorizedError extends ServerError {
  override name = "NotAuthorizedError";
  /** The wire code of this class. */
  static readonly CODE = 0x18;
}

type ServerErrorClass = new (
  code: number,
  reason?: string,
  origin?: ErrorOrigin,
  options?: MonolockErrorOptions,
) => ServerError;

interface CodeEntry {
  readonly name: string;
  readonly text: string;
  readonly cls: ServerErrorClass & { readonly CODE: number };
}

/**
 * Every known code: the spec's name, canonical text and class, keyed by the
 * class's `CODE` so that each code is written once. A unit test compares
 * this table with `spec/errors.json`.
 */
const CODES: ReadonlyMap<number, CodeEntry> = new Map(
  [
    { name: "SHUTTING_DOWN", text: "server shutting down", cls: ShuttingDownError },
    { name: "ADMIN_CLOSED", text: "closed by administrator", cls: AdminClosedError },
    { name: "UNSUPPORTED_VERSION", text: "unsupported protocol version", cls: UnsupportedVersionError },
    { name: "EXPECTED_ACQUIRE", text: "first message must be ACQUIRE", cls: ExpectedAcquireError },
    { name: "DUPLICATE_ACQUIRE", text: "duplicate ACQUIRE", cls: DuplicateAcquireError },
    { name: "UNKNOWN_MESSAGE", text: "unknown message type", cls: UnknownMessageError },
    { name: "EMPTY_NAME", text: "empty lock name", cls: EmptyNameError },
    { name: "NAME_TOO_LONG", text: "lock name too long", cls: NameTooLongError },
    { name: "NAME_NOT_UTF8", text: "lock name is not valid UTF-8", cls: NameNotUtf8Error },
    { name: "INVALID_LEASE", text: "lease must be positive", cls: InvalidLeaseError },
    { name: "NOT_AUTHORIZED", text: "not authorized for lock", cls: NotAuthorizedError },
  ].map((e): [number, CodeEntry] => [e.cls.CODE, e]),
);

/** Known wire codes with their spec name and canonical text. */
export function knownCodes(): { code: number; name: string; text: string }[] {
  return [...CODES].map(([code, e]) => ({ code, name: e.name, text: e.text }));
}

/** Whether a code is temporary: by range, so unknown codes are classified too. */
export function isTemporaryCode(code: number): boolean {
  return code < FIRST_TERMINAL_CODE;
}

/** The canonical text of a known code, or `undefined`. */
export function canonicalText(code: number): string | undefined {
  return CODES.get(code)?.text;
}

/**
 * Builds the error for a wire code: the matching subclass for a known code,
 * a plain {@link ServerError} for an unknown one.
 */
export function errorForCode(code: number, reason = "", origin: ErrorOrigin = "server"): ServerError {
  const cls = CODES.get(code)?.cls ?? ServerError;
  return new cls(code, reason, origin);
}

function hexCode(code: number): string {
  return `0x${code.toString(16).padStart(2, "0")}`;
}

/** `tryAcquire` found the lock held by someone else. Temporary. */
export class LockBusyError extends MonolockError {
  override name = "LockBusyError";
  /** The lock name that was busy. */
  readonly lockName: string;
  /** @internal */
  constructor(lockName: string) {
    super(`monolock: lock ${JSON.stringify(lockName)} is held by another session`, null, true);
    this.lockName = lockName;
  }
}

/**
 * The acquisition's `timeoutMs` passed before the lock was granted. `cause`
 * holds the last failure while retrying, if there was one, and the message
 * says what it was (a server that is down is not a busy lock). Temporary.
 */
export class AcquireTimeoutError extends MonolockError {
  override name = "AcquireTimeoutError";
  /** @internal */
  constructor(timeoutMs: number, options?: MonolockErrorOptions) {
    const last = options?.cause instanceof Error ? `; last attempt: ${withoutPrefix(options.cause.message)}` : "";
    super(`monolock: lock not acquired within ${timeoutMs} ms${last}`, null, true, options);
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
