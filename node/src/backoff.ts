/** Retry backoff of a waiting acquisition: exponential, equal jitter. */

import { RETRY } from "./constants.js";

/**
 * The sleep before retry number `attempt` (0-based):
 * `d = min(max, initial * multiplier^attempt)`, uniformly in `[d/2, d]`.
 * `random` returns a value in [0, 1).
 */
export function backoffDelay(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(RETRY.maxMs, RETRY.initialMs * RETRY.multiplier ** attempt);
  return ceiling / 2 + random() * (ceiling / 2);
}
