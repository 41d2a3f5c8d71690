// The watch vectors' fields (spec/vectors/frames.json's watch sections and
// spec/vectors/watch.json's events) as the decoder's events.
import assert from "node:assert/strict";
import { WATCH } from "../../src/constants.js";
import { blankEvent } from "../../src/watch-frames.js";

/** One frame of a watch section, with every field any kind may carry. */
export interface WatchVector {
  desc?: string;
  type?: string;
  name?: string;
  lease_ms?: number;
  kind?: string;
  epoch?: string;
  seq?: string;
  resync?: boolean;
  holders?: number;
  waiters?: number;
  ms?: number;
  token?: string;
  arrival?: string;
  mode?: number;
  limit?: number;
  identity?: string;
  value?: string;
  why?: number;
  hex?: string;
}

/** The vectors' kind names, mapped through the generated constants. */
const KIND_NAMES: Record<string, number> = {
  snapshot: WATCH.KINDS.snapshot,
  holder: WATCH.KINDS.holder,
  waiter: WATCH.KINDS.waiter,
  snapshot_end: WATCH.KINDS.snapshotEnd,
  granted: WATCH.KINDS.granted,
  value: WATCH.KINDS.value,
  ended: WATCH.KINDS.ended,
  held_back: WATCH.KINDS.heldBack,
  queued: WATCH.KINDS.queued,
  left: WATCH.KINDS.left,
  blocked: WATCH.KINDS.blocked,
};

export const big = (s: string | undefined): bigint => BigInt(s ?? "0");

/** The event a vector describes. */
export function vectorEvent(v: WatchVector) {
  const kind = KIND_NAMES[v.kind ?? ""];
  assert.ok(kind !== undefined, `unknown kind ${v.kind}`);
  const e = blankEvent(big(v.epoch), big(v.seq), kind);
  e.resync = v.resync ?? false;
  e.holders = v.holders ?? 0;
  e.waiters = v.waiters ?? 0;
  e.ms = v.ms ?? 0;
  e.token = big(v.token);
  e.arrival = big(v.arrival);
  e.mode = v.mode ?? 0;
  e.limit = v.limit ?? 0;
  e.identity = v.identity ?? "";
  e.value = new TextEncoder().encode(v.value ?? "");
  e.why = v.why ?? 0;
  return e;
}
