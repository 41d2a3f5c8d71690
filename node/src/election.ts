/**
 * Leader election is a lock with a value, and a watch of it. A term is a
 * grant: its token fences the leader's writes, its loss is told before the
 * server could elect anyone else (0.2 × lease before), and a resign hands
 * the name to the next candidate at once. Followers watch the name, and
 * see "unknown" rather than an old leader once their watch can no longer
 * vouch for what it shows.
 */

import { Lock } from "./lock.js";
import type { WatchState } from "./watch-core.js";

/**
 * One leadership of a name: the lock the candidate was granted
 * ({@link Client.campaign}). Watch its `signal` (or `lost`) and stop
 * leading when it fires; fence every write with its `token`.
 */
export class Term extends Lock {
  /** Ends the term, as `release()` does: the next candidate is elected at once. */
  resign(): Promise<void> {
    return this.release();
  }
}

/**
 * What a follower knows of a name's leader:
 * - `"unknown"`: the watch cannot vouch for anything now (its server went
 *   silent, or it is between connections). Act on no leader.
 * - `"no-leader"`: nobody leads, and nobody is held back.
 * - `"leader"`: the leader is `token`, reached by its `value`.
 * - `"held-back"`: no leader can be elected before `until`: a leader whose
 *   connection went (`token` set; it may still act), or a restarted or
 *   failed-over server waiting for leaders it does not know (`token` 0).
 */
export type LeaderState = "unknown" | "no-leader" | "leader" | "held-back";

/** What a follower sees of a name's leadership at one moment. */
export interface Observation {
  readonly state: LeaderState;
  /** The leader's fencing token; 0n when there is none. */
  readonly token: bigint;
  /** The leader's value (empty when there is none). */
  readonly value: Uint8Array;
  /** The leader's certificate identity, or its address. */
  readonly identity: string;
  /** `"held-back"`: until when, on the `performance.now()` clock. */
  readonly until: number | undefined;
  /** How many claims wait to lead after this one. */
  readonly candidates: number;
}

const NOTHING = new Uint8Array(0);

/** Reads a watch's picture at `now` as an election: the first holder is the leader. */
export function observationOf(st: WatchState, now: number): Observation {
  const none = { token: 0n, value: NOTHING, identity: "", until: undefined };
  if (!st.known) return { state: "unknown", ...none, candidates: 0 };
  const candidates = st.waiters.length;
  const h = st.holders[0];
  if (h !== undefined) {
    const { token, value, identity, heldBackUntil } = h;
    if (heldBackUntil !== undefined)
      return { state: "held-back", token, value, identity, until: heldBackUntil, candidates };
    return { state: "leader", token, value, identity, until: undefined, candidates };
  }
  if (st.blockedUntil !== undefined && st.blockedUntil > now) {
    return { state: "held-back", ...none, until: st.blockedUntil, candidates };
  }
  return { state: "no-leader", ...none, candidates };
}

/** Whether two observations say the same. */
export function sameObservation(a: Observation, b: Observation): boolean {
  return (
    a.state === b.state &&
    a.token === b.token &&
    Buffer.compare(a.value, b.value) === 0 &&
    a.identity === b.identity &&
    a.until === b.until &&
    a.candidates === b.candidates
  );
}

/** How long until the observation can change with no event: its validity ends, or a block ends. */
export function nextTransitionMs(st: WatchState, o: Observation, now: number): number {
  let ms = 3_600_000;
  if (st.known && st.validUntil !== undefined) ms = Math.min(ms, st.validUntil - now);
  if (o.state === "held-back" && o.token === 0n && o.until !== undefined) ms = Math.min(ms, o.until - now);
  return Math.max(ms, 1);
}
