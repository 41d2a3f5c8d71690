/**
 * Checks an ACQUIRE before any byte is sent, in the server's order, so the
 * client refuses exactly what the server would refuse, with the same code.
 */

import { MAX_LEASE_MS, MAX_NAME_LEN, MAX_VALUE_LEN, MIN_LEASE_MS, SHARED } from "./constants.js";
import {
  EmptyNameError,
  errorForCode,
  InvalidLeaseError,
  InvalidModeError,
  NameNotUtf8Error,
  NameTooLongError,
  type ServerError,
  ValueTooLongError,
} from "./errors.js";

/** A lock name: text, or raw bytes that must be valid UTF-8. */
export type LockName = string | Uint8Array;

/** A claim's value: raw bytes (a Buffer is one), or text sent as UTF-8. */
export type ClaimValue = string | Uint8Array;

/** A name that passed validation: its wire bytes and its text. */
export interface ValidName {
  readonly bytes: Uint8Array;
  readonly text: string;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

function refuse(code: number, reason = ""): ServerError {
  return errorForCode(code, reason, "client");
}

/** The lease rule of spec/constants.json, with the value given. */
function invalidLease(leaseMs: unknown): ServerError {
  const given = typeof leaseMs === "string" ? JSON.stringify(leaseMs) : String(leaseMs);
  return refuse(
    InvalidLeaseError.CODE,
    `lease must be a whole number of milliseconds from ${MIN_LEASE_MS} ms to ${MAX_LEASE_MS} ms, got ${given}`,
  );
}

/** Length and limit, never the name itself: it may be long. */
function nameTooLong(byteLength: number): ServerError {
  return refuse(NameTooLongError.CODE, `lock name is ${byteLength} bytes, the limit is ${MAX_NAME_LEN}`);
}

/** What a claim asks for, as the caller spelled it: exclusive unless `shared` or `limit`; no value unless `value`. */
export interface ClaimRequest {
  readonly shared?: boolean | undefined;
  readonly limit?: number | undefined;
  readonly value?: ClaimValue | undefined;
}

/** The mode and limit of a shared claim, as sent in a version 2 ACQUIRE. */
export interface SharedClaim {
  readonly mode: number;
  /** 0: any number of shared holders; N: a semaphore of N permits. */
  readonly limit: number;
}

/**
 * A claim that passed validation; `shared` is undefined for an exclusive
 * claim, `value` for a claim without a value (or with an empty one). A claim
 * with a value is sent as version 3, else a shared one as version 2 and an
 * exclusive one as version 1.
 */
export interface ValidClaim extends ValidName {
  readonly shared: SharedClaim | undefined;
  readonly value: Uint8Array | undefined;
}

/** The semaphore limit rule, with the value given (Go's words). */
function invalidLimit(limit: unknown): ServerError {
  const given = typeof limit === "string" ? JSON.stringify(limit) : String(limit);
  return refuse(
    InvalidModeError.CODE,
    `a semaphore's limit must be a whole number from 1 to ${SHARED.LIMIT_MAX} permits, got ${given}`,
  );
}

/** The shared claim `request` asks for, or undefined for an exclusive one; throws 0x19 for a bad limit. */
function sharedClaim(request: ClaimRequest): SharedClaim | undefined {
  const { shared, limit } = request;
  if (shared !== undefined && shared !== null && typeof shared !== "boolean") {
    throw new TypeError("monolock: shared must be true or false");
  }
  if (limit === undefined || limit === null) {
    return shared === true ? { mode: SHARED.MODE_SHARED, limit: 0 } : undefined;
  }
  if (!Number.isInteger(limit) || limit < 1 || limit > SHARED.LIMIT_MAX) throw invalidLimit(limit);
  if (shared === false) {
    throw refuse(InvalidModeError.CODE, `an exclusive claim has no limit, got shared: false with limit ${limit}`);
  }
  return { mode: SHARED.MODE_SHARED, limit };
}

/** Throws {@link InvalidLeaseError} (origin client) unless `leaseMs` is a whole number from 1 to 2^32-1. */
export function checkLease(leaseMs: number): void {
  if (!Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS) {
    throw invalidLease(leaseMs);
  }
}

/**
 * Validates lease, claim, name and value in the server's order (lease, then
 * mode and limit, then empty, too long, not UTF-8, then the value's length)
 * and returns the name's bytes with the shared claim and the value, if any.
 * Throws the matching {@link ServerError} with `origin: "client"`.
 */
export function validateAcquire(name: LockName, leaseMs: number, request: ClaimRequest = {}): ValidClaim {
  checkLease(leaseMs);
  const shared = sharedClaim(request);
  const valid = validateName(name);
  return { ...valid, shared, value: validateValue(request.value) };
}

/**
 * Validates a version 3 ACQUIRE given as wire values in the server's order:
 * that of version 2 ({@link validateAcquireV2}), then the value's length.
 * Returns the name and the value's bytes (empty for an empty value). For the
 * spec's byte vectors; the client builds its claims with {@link validateAcquire}.
 */
export function validateAcquireV3(
  name: LockName,
  leaseMs: number,
  mode: number,
  limit: number,
  value: ClaimValue,
): ValidName & { readonly value: Uint8Array } {
  const valid = validateAcquireV2(name, leaseMs, mode, limit);
  return { ...valid, value: validateValue(value) ?? new Uint8Array(0) };
}

/**
 * The value's bytes, or undefined for none (absent or empty); throws 0x1b
 * for one over {@link MAX_VALUE_LEN} bytes. A string is measured and sent
 * as UTF-8 (a lone surrogate as U+FFFD, the 3 bytes it is measured as).
 */
export function validateValue(value: ClaimValue | undefined | null): Uint8Array | undefined {
  if (value === undefined || value === null) return undefined;
  let length: number;
  if (typeof value === "string") {
    length = Buffer.byteLength(value, "utf8");
  } else if (value instanceof Uint8Array) {
    length = value.length;
  } else {
    throw new TypeError("monolock: value must be a string or a Uint8Array");
  }
  if (length > MAX_VALUE_LEN) {
    throw refuse(ValueTooLongError.CODE, `value is ${length} bytes, the limit is ${MAX_VALUE_LEN}`);
  }
  if (length === 0) return undefined;
  // A copy: the caller may reuse its buffer while the claim is sent again.
  return typeof value === "string" ? encoder.encode(value) : Uint8Array.from(value);
}

/**
 * Validates a version 2 ACQUIRE given as wire values (mode byte, limit) in
 * the server's order: lease, mode and limit (mode 0 or 1, an exclusive claim
 * with limit 0), then the name. For the spec's byte vectors; the client
 * builds its claims with {@link validateAcquire}.
 */
export function validateAcquireV2(name: LockName, leaseMs: number, mode: number, limit: number): ValidName {
  checkLease(leaseMs);
  const modeOk = mode === SHARED.MODE_SHARED || (mode === SHARED.MODE_EXCLUSIVE && limit === 0);
  if (!modeOk) throw refuse(InvalidModeError.CODE);
  if (!Number.isInteger(limit) || limit < 0 || limit > SHARED.LIMIT_MAX) throw invalidLimit(limit);
  return validateName(name);
}

/** The name checks (empty, too long, not UTF-8); returns its bytes and text. */
function validateName(name: LockName): ValidName {
  if (typeof name === "string") {
    // Length in bytes of UTF-8; a lone surrogate counts as the 3 bytes the
    // server would see for it, so a too-long name is reported before its
    // encoding, as the server does.
    const byteLength = Buffer.byteLength(name, "utf8");
    if (byteLength === 0) throw refuse(EmptyNameError.CODE);
    if (byteLength > MAX_NAME_LEN) throw nameTooLong(byteLength);
    if (!isWellFormed(name)) throw refuse(NameNotUtf8Error.CODE);
    return { bytes: encoder.encode(name), text: name };
  }
  if (!(name instanceof Uint8Array)) {
    throw new TypeError("monolock: lock name must be a string or a Uint8Array");
  }
  if (name.length === 0) throw refuse(EmptyNameError.CODE);
  if (name.length > MAX_NAME_LEN) throw nameTooLong(name.length);
  let text: string;
  try {
    text = strictUtf8.decode(name);
  } catch {
    throw refuse(NameNotUtf8Error.CODE);
  }
  return { bytes: Uint8Array.from(name), text };
}

/**
 * Whether a string has no lone surrogate, i.e. encodes to valid UTF-8.
 * (`String.prototype.isWellFormed` needs Node 20; this runs on 18.)
 */
export function isWellFormed(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1); // NaN past the end
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      return false;
    }
  }
  return true;
}
