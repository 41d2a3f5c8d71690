/**
 * Checks an ACQUIRE before any byte is sent, in the server's order, so the
 * client refuses exactly what the server would refuse, with the same code.
 */

import { MAX_LEASE_MS, MAX_NAME_LEN, MIN_LEASE_MS } from "./constants.js";
import {
  EmptyNameError,
  errorForCode,
  InvalidLeaseError,
  NameNotUtf8Error,
  NameTooLongError,
  type ServerError,
} from "./errors.js";

/** A lock name: text, or raw bytes that must be valid UTF-8. */
export type LockName = string | Uint8Array;

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

/**
 * Validates lease and name (lease first, then empty, too long, not UTF-8)
 * and returns the name's bytes. Throws the matching {@link ServerError} with
 * `origin: "client"`.
 */
export function validateAcquire(name: LockName, leaseMs: number): ValidName {
  if (!Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS) {
    throw invalidLease(leaseMs);
  }
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
