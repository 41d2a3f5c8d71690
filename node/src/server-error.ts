/**
 * The base classes of the errors with and without a wire code, apart from
 * errors.ts so that the generated class of each code (errors.gen.ts) can
 * extend ServerError before errors.ts maps codes to classes. errors.ts
 * exports everything here.
 *
 * @packageDocumentation
 */

import { ERRORS } from "./constants.gen.js";

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
    super(`monolock: ${messageText(code, reason)} (${hexCode(code)})`, code, isTemporaryCode(code), options);
    this.reason = reason !== "" ? reason : (canonicalText(code) ?? "");
    this.origin = origin;
  }
}

/** Whether a code is temporary: by range, so unknown codes are classified too. */
export function isTemporaryCode(code: number): boolean {
  return code < ERRORS.firstTerminalCode;
}

const TEXTS: ReadonlyMap<number, string> = new Map(ERRORS.codes.map((e) => [e.code, e.text]));

/** The canonical text of a known code, or `undefined`. */
export function canonicalText(code: number): string | undefined {
  return TEXTS.get(code);
}

/** The code of NOT_ACTIVE, whose reason is an address (looked up here: errors.gen.ts extends this file). */
const NOT_ACTIVE_CODE = ERRORS.codes.find((e) => e.name === "NOT_ACTIVE")?.code;

/**
 * The text of an ERROR's message (spec/vectors/messages.json): the reason,
 * else the code's canonical text. A reason of NOT_ACTIVE is the active
 * server's address, which alone would not say what went wrong.
 */
function messageText(code: number, reason: string): string {
  if (reason === "") return canonicalText(code) ?? "unknown error";
  if (code === NOT_ACTIVE_CODE) return `${canonicalText(code)}; the active server is ${reason}`;
  return reason;
}

/** `0x05`: a code as the protocol docs write it. */
function hexCode(code: number): string {
  return `0x${code.toString(16).padStart(2, "0")}`;
}
