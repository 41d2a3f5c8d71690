/** Retry backoff of a waiting acquisition: exponential, equal jitter. */

import { RETRY } from "./constants.js";

/** The ceiling of sleep number `attempt` (0-based): `min(max, initial * multiplier^attempt)`. */
export function backoffCeiling(attempt: number): number {
  return Math.min(RETRY.maxMs, RETRY.initialMs * RETRY.multiplier ** attempt);
}

/**
 * The sleep before retry number `attempt` (0-based): uniformly in
 * `[d/2, d]` with `d` its {@link backoffCeiling}. `random` returns a value in [0, 1).
 */
export function backoffDelay(attempt: number, random: () => number = Math.random): number {
  const ceiling = backoffCeiling(attempt);
  return ceiling / 2 + random() * (ceiling / 2);
}
