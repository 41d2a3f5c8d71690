/**
 * Protocol constants of monolock wire protocol version 1.
 *
 * The values come from `spec/constants.json` through the generated
 * constants.gen.ts; a unit test loads that file and compares every value
 * here against it.
 *
 * @packageDocumentation
 */

import { ERRORS, SPEC } from "./constants.gen.js";

/** Protocol version this client speaks. */
export const PROTOCOL_VERSION = SPEC.protocolVersion;

/**
 * Shared locks and semaphores (protocol version 2): the version of the
 * ACQUIRE that carries a mode and a limit, the mode bytes, and the largest
 * limit (uint16).
 */
export const SHARED = {
  PROTOCOL_VERSION: SPEC.shared.protocolVersion,
  MODE_EXCLUSIVE: SPEC.shared.modeExclusive,
  MODE_SHARED: SPEC.shared.modeShared,
  LIMIT_MAX: SPEC.shared.limitMax,
} as const;

/**
 * Claims with a value (protocol version 3): the version of the ACQUIRE
 * that carries one, its largest length in bytes, and the type byte of
 * PROCLAIM, which replaces the value of the claim on its connection.
 */
export const VALUE = {
  PROTOCOL_VERSION: SPEC.value.protocolVersion,
  MAX_VALUE_LEN: SPEC.value.maxValueLen,
  PROCLAIM_TYPE: SPEC.value.proclaimType,
} as const;

/** Largest value of a claim, in bytes. A protocol constant, not a setting. */
export const MAX_VALUE_LEN = VALUE.MAX_VALUE_LEN;

/** Message type bytes, client to server and server to client. */
export const MessageType = {
  /**
   * `[0x01][version u8][lease_ms u32][name_len u16][name]`; versions 2 and 3
   * have `[mode u8][limit u16]` before `name_len`, version 3
   * `[value_len u16][value]` after the name
   */
  ACQUIRE: SPEC.messageTypes.ACQUIRE,
  /** `[0x02]` */
  HEARTBEAT: SPEC.messageTypes.HEARTBEAT,
  /** `[0x11]` */
  WAITING: SPEC.messageTypes.WAITING,
  /** `[0x12][token u64]` */
  ACQUIRED: SPEC.messageTypes.ACQUIRED,
  /** `[0x13][code u8][reason_len u8][reason]` */
  ERROR: SPEC.messageTypes.ERROR,
} as const;

/** Largest lock name, in bytes of UTF-8. A protocol constant, not a setting. */
export const MAX_NAME_LEN = SPEC.maxNameLen;

/** Smallest lease the protocol accepts, in milliseconds. */
export const MIN_LEASE_MS = SPEC.leaseMs.min;

/** Largest lease the wire format can carry (uint32), in milliseconds. */
export const MAX_LEASE_MS = SPEC.leaseMs.max;

/** First ERROR code that is terminal; every code below it is temporary. */
export const FIRST_TERMINAL_CODE = ERRORS.firstTerminalCode;

/** Heartbeat schedule factors (see {@link HeartbeatSchedule}). */
export const HEARTBEAT = SPEC.heartbeat;

/** Backoff between attempts of a waiting acquisition (the policy is `RetryPlan` in plan.ts). */
export const RETRY = SPEC.retry;

/** Port of `monolock serve` when an address names none. */
export const DEFAULT_PORT = SPEC.clientDefaults.defaultPort;

/** The server a client talks to when given none: where `monolock serve` listens. */
export const DEFAULT_SERVER = SPEC.clientDefaults.defaultServer;

/**
 * Longest a release waits for the server to close its end, in milliseconds
 * (also at most the client timeout).
 */
export const RELEASE_WAIT_MS = SPEC.release.maxWaitMs;

/**
 * The watch of a name (protocol version 3): the WATCH request's type byte
 * and version, the server's EVENT and WATCHING type bytes, the kinds of
 * EVENT, and why a holding ended, was held back, or a name is blocked.
 */
export const WATCH = {
  PROTOCOL_VERSION: SPEC.watch.protocolVersion,
  WATCH_TYPE: SPEC.watch.watchType,
  EVENT_TYPE: SPEC.watch.eventType,
  WATCHING_TYPE: SPEC.watch.watchingType,
  KINDS: SPEC.watch.eventKinds,
  SNAPSHOT_FLAG_RESYNC: SPEC.watch.snapshotFlagResync,
  END_REASONS: SPEC.watch.endReasons,
  HOLD_REASONS: SPEC.watch.holdReasons,
  BLOCK_REASONS: SPEC.watch.blockReasons,
} as const;

/**
 * Sessions (protocol version 4): one connection carrying many claims and
 * watches, each a stream with an id. The type bytes of the client's
 * SESSION, OPEN, ON and RELEASE and of the server's SESSION_OK, STREAM,
 * RELEASED, STREAM_END and ALIVE, the largest stream id, and the server's
 * default cap of open streams.
 */
export const SESSION = {
  PROTOCOL_VERSION: SPEC.session.protocolVersion,
  SESSION_TYPE: SPEC.session.sessionType,
  OPEN_TYPE: SPEC.session.openType,
  ON_TYPE: SPEC.session.onType,
  RELEASE_TYPE: SPEC.session.releaseType,
  SESSION_OK_TYPE: SPEC.session.sessionOkType,
  STREAM_TYPE: SPEC.session.streamType,
  RELEASED_TYPE: SPEC.session.releasedType,
  STREAM_END_TYPE: SPEC.session.streamEndType,
  ALIVE_TYPE: SPEC.session.aliveType,
  MAX_STREAM_ID: SPEC.session.maxStreamId,
  MAX_STREAMS_DEFAULT: SPEC.session.maxStreamsDefault,
} as const;
