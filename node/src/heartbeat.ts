/**
 * The heartbeat schedule: how often to send HEARTBEAT and how long a grant
 * stays valid, derived from the lease and the measured round-trip time.
 */

import { HEARTBEAT } from "./constants.js";

/**
 * How long an acknowledged send keeps a grant valid: `0.8 * lease` (the
 * spec's client_timeout_factor). Also the release wait's first bound and the
 * wait that a "no reply" error reports.
 */
export function clientTimeoutMs(leaseMs: number): number {
  return leaseMs * HEARTBEAT.clientTimeoutFactor;
}

/**
 * 0.8 x lease in milliseconds for a message, exactly: a whole number or one
 * decimal ("800.8" for 1001), never a float's rounding (1001 * 0.8 is
 * 800.8000000000001). The other clients print the same.
 */
export function clientTimeoutText(leaseMs: number): string {
  const tenths = leaseMs * 8; // an integer: leases are whole ms below 2^32
  const whole = Math.floor(tenths / 10);
  return tenths % 10 === 0 ? `${whole}` : `${whole}.${tenths % 10}`;
}

/**
 * Heartbeat arithmetic for one connection. With `lease` the lease in ms:
 * `base = lease/4`, `clientTimeout = 0.8*lease`, `srtt` an EWMA of RTT
 * samples (alpha 0.2, the first sample initialises it) and
 * `interval = min(max(base - 2*srtt, 1 ms), base)`.
 * RTT can only shorten the interval, never stretch it past `base`.
 */
export class HeartbeatSchedule {
  /** `lease / 4`, the interval before any RTT sample. */
  readonly baseIntervalMs: number;
  /** `0.8 * lease`: how long an acknowledged send keeps a grant valid. */
  readonly clientTimeoutMs: number;
  private smoothed: number | undefined;

  /** @param leaseMs the connection's lease, in milliseconds */
  constructor(leaseMs: number) {
    this.baseIntervalMs = leaseMs * HEARTBEAT.baseIntervalFactor;
    this.clientTimeoutMs = clientTimeoutMs(leaseMs);
  }

  /** The smoothed RTT, or `undefined` before the first sample. */
  get srttMs(): number | undefined {
    return this.smoothed;
  }

  /** Feeds one RTT sample (send of ACQUIRE/HEARTBEAT to its reply). */
  addSample(rttMs: number): void {
    this.smoothed =
      this.smoothed === undefined ? rttMs : HEARTBEAT.srttAlpha * rttMs + (1 - HEARTBEAT.srttAlpha) * this.smoothed;
  }

  /** Time from one heartbeat send to the next. */
  get intervalMs(): number {
    const safeRtt = HEARTBEAT.safeRttFactor * (this.smoothed ?? 0);
    return Math.min(Math.max(this.baseIntervalMs - safeRtt, HEARTBEAT.minIntervalMs), this.baseIntervalMs);
  }
}
