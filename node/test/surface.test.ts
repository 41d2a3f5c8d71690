// Pins the public surface: adding or removing an export is a deliberate act.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as monolock from "../src/index.js";

test("exports exactly the documented names", () => {
  assert.deepEqual(Object.keys(monolock).sort(), [
    "AcquireAbortedError",
    "AcquireTimeoutError",
    "AdminClosedError",
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
    "Lock",
    "LockBusyError",
    "LockLostError",
    "LockReleasedError",
    "MAX_LEASE_MS",
    "MAX_NAME_LEN",
    "MIN_LEASE_MS",
    "MonolockError",
    "NameNotUtf8Error",
    "NameTooLongError",
    "NotAuthorizedError",
    "NotMonolockError",
    "PROTOCOL_VERSION",
    "ServerEndedError",
    "ServerError",
    "ShuttingDownError",
    "UnknownMessageError",
    "UnsupportedVersionError",
    "errorForCode",
    "isTemporaryCode",
  ]);
});

test("Lock is async-disposable", () => {
  assert.equal(typeof (monolock.Lock.prototype as unknown as Record<symbol, unknown>)[Symbol.asyncDispose], "function");
});
