/**
 * monolock: client for the monolock lock service.
 *
 * ```ts
 * import { Client } from "monolock";
 * const client = new Client(); // 127.0.0.1:7117
 * await using lock = await client.acquire("jobs/nightly");
 * console.log(lock.token); // fencing token, a bigint
 * ```
 *
 * @packageDocumentation
 */

export type { AcquireOptions, CampaignOptions, ClientOptions } from "./client.js";
export { Client, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_LEASE_MS } from "./client.js";
export {
  FIRST_TERMINAL_CODE,
  MAX_LEASE_MS,
  MAX_NAME_LEN,
  MAX_VALUE_LEN,
  MIN_LEASE_MS,
  PROTOCOL_VERSION,
} from "./constants.js";
export type { LeaderState, Observation } from "./election.js";
export { Term } from "./election.js";
// One class per code of spec/errors.json (ShuttingDownError, ...).
export * from "./errors.gen.js";
export type { BusyClaim, ConnectionPhase, ErrorOrigin, LostKind, MonolockErrorOptions } from "./errors.js";
export {
  AcquireAbortedError,
  AcquireTimeoutError,
  CertificateError,
  ConnectionError,
  errorForCode,
  isTemporaryCode,
  LockBusyError,
  LockLostError,
  LockReleasedError,
  MonolockError,
  NotMonolockError,
  NoValueError,
  ServerEndedError,
  ServerError,
  SessionUnsupportedError,
  SharedUnsupportedError,
  ValueUnsupportedError,
} from "./errors.js";
export type { LockState, ProclaimOptions } from "./lock.js";
export { Lock } from "./lock.js";
export type { SessionAcquireOptions, SessionOptions } from "./lock-session.js";
export { Session } from "./lock-session.js";
export type { Logger } from "./logger.js";
export type { SessionPoolOptions } from "./session-pool.js";
export { SessionPool } from "./session-pool.js";
export type { CertificateSide } from "./tlscert.js";
export type { ClaimValue, LockName } from "./validate.js";
export type { WatchIterationOptions, WatchOptions } from "./watch.js";
export { Watch } from "./watch.js";
export type { Holder, Waiter, WatchState } from "./watch-core.js";
