/**
 * Timers that accept any delay and need not keep the process alive.
 *
 * @packageDocumentation
 */

/** Node fires a longer setTimeout at once (with a warning), so long delays are chained. */
const MAX_TIMEOUT_MS = 0x7fff_ffff;

/** A cancellable timer that accepts any delay. */
export interface Timer {
  cancel(): void;
}

/**
 * Runs `fn` after `delayMs`. With `ref: false` the timer never keeps the
 * process alive on its own (use it where a socket already does).
 */
export function startTimer(delayMs: number, fn: () => void, ref: boolean): Timer {
  let handle: NodeJS.Timeout | undefined;
  const deadline = performance.now() + delayMs;
  const arm = (ms: number): void => {
    handle = setTimeout(
      () => {
        const left = deadline - performance.now();
        if (left >= 1) {
          // Either a chained long delay, or a timer that landed early.
          arm(left);
        } else {
          handle = undefined;
          fn();
        }
      },
      Math.min(Math.max(ms, 0), MAX_TIMEOUT_MS),
    );
    if (!ref) handle.unref();
  };
  arm(delayMs);
  return {
    cancel(): void {
      if (handle !== undefined) clearTimeout(handle);
      handle = undefined;
    },
  };
}
