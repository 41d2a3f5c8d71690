/**
 * Protocol constants of monolock wire protocol version 1.
 *
 * The values mirror `spec/constants.json`; a unit test loads that file and
 * compares every value here against it.
 *
 * @packageDocumentation
 */

/** Protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;

/** Message type bytes, client to server and server to client. */
export const MessageType = {
  /** `[0x01][version u8][lease_ms u32][name_len u16][name]` */
  ACQUIRE: 0x01,
  /** `[0x02]` */
  HEARTBEAT: 0x02,
  /** `[0x11]` */
  WAITING: 0x11,
  /** `[0x12][token u64]` */
  ACQUIRED: 0x12,
  /** `[0x13][code u8][reason_len u8][reason]` */
  ERROR: 0x13,
} as const;

/** Largest lock name, in bytes of UTF-8. A protocol constant, not a setting. */
export const MAX_NAME_LEN = 255;

/** Smallest lease the protocol accepts, in milliseconds. */
export const MIN_LEASE_MS = 1;

/** Largest lease the wire format can carry (uint32), in milliseconds. */
export const MAX_LEASE_MS = 0xffff_ffff;

/** First ERROR code that is terminal; every code below it is temporary. */
export const FIRST_TERMINAL_CODE = 0x10;

/** Heartbeat schedule factors (see {@link HeartbeatSchedule}). */
export const HEARTBEAT = {
  baseIntervalFactor: 0.25,
  clientTimeoutFactor: 0.8,
  srttAlpha: 0.2,
  safeRttFactor: 2,
  minIntervalMs: 1,
} as const;

/** Backoff between attempts of a waiting acquisition (the policy is `RetryPlan` in plan.ts). */
export const RETRY = {
  initialMs: 50,
  maxMs: 2000,
  multiplier: 2,
  /** A claim queued at least this long before it failed starts the backoff again. */
  resetAfterQueuedMs: 2000,
} as const;

/** Port of `monolock serve` when an address names none. */
export const DEFAULT_PORT = 7117;

/** The server a client talks to when given none: where `monolock serve` listens. */
export const DEFAULT_SERVER = "127.0.0.1:7117";
