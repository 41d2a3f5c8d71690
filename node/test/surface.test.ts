// Pins the public surface: adding or removing an export is a deliberate act.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as monolock from "../src/index.js";

test("exports exactly the documented names", () => {
  assert.deepEqual(Object.keys(monolock).sort(), [
    "AcquireAbortedError",
    "AcquireTimeoutError",
    "AdminClosedError",
    "BadStreamError",
    "CertificateError",
    "Client",
    "ConnectionError",
    "DEFAULT_CONNECT_TIMEOUT_MS",
    "DEFAULT_LEASE_MS",
    "DuplicateAcquireError",
    "EmptyNameError",
    "ExpectedAcquireError",
    "FIRST_TERMINAL_CODE",
    "InvalidLeaseError",
    "InvalidModeError",
    "LimitMismatchError",
    "Lock",
    "LockBusyError",
    "LockLostError",
    "LockReleasedError",
    "MAX_LEASE_MS",
    "MAX_NAME_LEN",
    "MAX_VALUE_LEN",
    "MIN_LEASE_MS",
    "MonolockError",
    "NameNotUtf8Error",
    "NameTooLongError",
    "NoValueError",
    "NotActiveError",
    "NotAuthorizedError",
    "NotMonolockError",
    "PROTOCOL_VERSION",
    "ServerEndedError",
    "ServerError",
    "Session",
    "SessionPool",
    "SessionUnsupportedError",
    "SharedUnsupportedError",
    "ShuttingDownError",
    "Term",
    "TooManyStreamsError",
    "UnknownMessageError",
    "UnsupportedVersionError",
    "ValueTooLongError",
    "ValueUnsupportedError",
    "Watch",
    "WatcherBehindError",
    "errorForCode",
    "isTemporaryCode",
  ]);
});

test("Lock and Session are async-disposable", () => {
  assert.equal(typeof (monolock.Lock.prototype as unknown as Record<symbol, unknown>)[Symbol.asyncDispose], "function");
  assert.equal(
    typeof (monolock.Session.prototype as unknown as Record<symbol, unknown>)[Symbol.asyncDispose],
    "function",
  );
});

test("SessionUnsupportedError is an UnsupportedVersionError with the code the server sent, terminal", () => {
  const err = new monolock.SessionUnsupportedError("127.0.0.1:7117", 0x13, "unknown message type: 0x05");
  assert.ok(err instanceof monolock.UnsupportedVersionError);
  assert.equal(err.code, 0x13);
  assert.equal(err.reason, "unknown message type: 0x05");
  assert.equal(err.temporary, false);
  assert.equal(err.name, "SessionUnsupportedError");
  assert.equal(
    err.message,
    "monolock: server 127.0.0.1:7117 does not support sessions (it answered a protocol version 4 SESSION " +
      "with 0x13 unknown message type); take each claim on its own connection, or upgrade the server",
  );
});

test("SharedUnsupportedError is an UnsupportedVersionError (0x10), terminal", () => {
  const err = new monolock.SharedUnsupportedError("127.0.0.1:7117");
  assert.ok(err instanceof monolock.UnsupportedVersionError);
  assert.ok(err instanceof monolock.ServerError);
  assert.equal(err.code, 0x10);
  assert.equal(err.temporary, false);
  assert.equal(err.name, "SharedUnsupportedError");
  assert.equal(
    err.message,
    "monolock: server 127.0.0.1:7117 does not support shared locks or semaphores (it answered a protocol " +
      "version 2 ACQUIRE with 0x10 unsupported protocol version); use an exclusive lock, or upgrade the server",
  );
  assert.ok(monolock.errorForCode(0x19) instanceof monolock.InvalidModeError);
  assert.ok(monolock.errorForCode(0x1a) instanceof monolock.LimitMismatchError);
});

test("NoValueError: proclaim on a lock claimed without a value, terminal, no code", () => {
  const err = new monolock.NoValueError("jobs/nightly");
  assert.ok(err instanceof monolock.MonolockError);
  assert.ok(!(err instanceof monolock.ServerError));
  assert.equal(err.code, null);
  assert.equal(err.temporary, false);
  assert.equal(err.name, "NoValueError");
  assert.equal(err.lockName, "jobs/nightly");
});

test("ValueUnsupportedError is an UnsupportedVersionError (0x10), terminal; MAX_VALUE_LEN is 1024", () => {
  const err = new monolock.ValueUnsupportedError("127.0.0.1:7117", "unsupported protocol version");
  assert.ok(err instanceof monolock.UnsupportedVersionError);
  assert.ok(err instanceof monolock.ServerError);
  assert.ok(!(err instanceof monolock.SharedUnsupportedError));
  assert.equal(err.code, 0x10);
  assert.equal(err.temporary, false);
  assert.equal(err.name, "ValueUnsupportedError");
  assert.equal(err.address, "127.0.0.1:7117");
  assert.equal(err.reason, "unsupported protocol version");
  assert.equal(
    err.message,
    "monolock: server 127.0.0.1:7117 does not support claims with a value (it answered a protocol " +
      "version 3 ACQUIRE with 0x10 unsupported protocol version); claim without a value, or upgrade the server",
  );
  assert.ok(monolock.errorForCode(0x1b) instanceof monolock.ValueTooLongError);
  assert.equal(monolock.MAX_VALUE_LEN, 1024);
});
