/**
 * The retry policy of one acquisition, as a pure plan (spec/constants.json
 * "retry", `spec/vectors/retry.json`): which server to connect to next,
 * when to sleep, when to give up. The caller runs each action and reports
 * the attempt's outcome; the caller's own deadline stays outside.
 */

import { backoffCeiling, backoffDelay } from "./backoff.js";
import { FIRST_TERMINAL_CODE, RETRY } from "./constants.js";
import type { Cause } from "./core.js";

/** The next step of an acquisition. */
export type PlanAction =
  | { readonly type: "connect"; readonly server: number }
  /** Back off for `ms`, drawn in [ceilingMs/2, ceilingMs]. */
  | { readonly type: "sleep"; readonly ms: number; readonly ceilingMs: number }
  /** The last attempt's error goes to the caller. */
  | { readonly type: "give_up" }
  | { readonly type: "done" };

/** How an attempt ended. */
export type Outcome =
  /** The lock was granted. */
  | "granted"
  /** No connection (TCP or TLS handshake failed, or the connect timed out). */
  | "connect_failed"
  /** The server answered, then the claim failed in a way a waiting acquisition retries. */
  | "requeue"
  /** An ERROR with a code >= 0x10. */
  | "terminal"
  /** Try-acquire got WAITING. */
  | "busy";

/** The outcome of a claim that ended without a grant; `connected`: the connection had been opened. */
export function outcomeOf(cause: Cause, connected: boolean): Outcome {
  switch (cause.kind) {
    case "busy":
      return "busy";
    case "server":
      return cause.code >= FIRST_TERMINAL_CODE ? "terminal" : "requeue";
    case "io":
      return connected ? "requeue" : "connect_failed";
    default:
      return "requeue";
  }
}

/**
 * One cursor over the servers, starting at the first; every failed attempt
 * moves it to the next (wrapping). A connect failure is retried at once
 * unless every server failed to connect since the last sleep; a server that
 * answered and then failed is always followed by a backoff sleep. Try-acquire
 * makes one pass and never sleeps.
 */
export class RetryPlan {
  private cursor = 0;
  /** Sleeps since the backoff last started over. */
  private backoffs = 0;
  private connectFailures = 0;
  private sleepNext = false;
  private finished: "give_up" | "done" | undefined;

  constructor(
    private readonly servers: number,
    private readonly mode: "wait" | "try",
    private readonly random: () => number = Math.random,
  ) {
    if (!(servers >= 1)) throw new RangeError("monolock: no servers");
  }

  /** What to do now. */
  next(): PlanAction {
    if (this.finished !== undefined) return { type: this.finished };
    if (this.sleepNext) {
      this.sleepNext = false;
      const ceilingMs = backoffCeiling(this.backoffs);
      return { type: "sleep", ms: backoffDelay(this.backoffs++, this.random), ceilingMs };
    }
    return { type: "connect", server: this.cursor };
  }

  /** Reports how the last `connect` ended; `queuedMs`: how long it had been queued after WAITING. */
  report(outcome: Outcome, queuedMs = 0): void {
    switch (outcome) {
      case "granted":
        this.finished = "done";
        return;
      case "terminal":
      case "busy":
        this.finished = "give_up";
        return;
      case "connect_failed":
        this.cursor = (this.cursor + 1) % this.servers;
        if (++this.connectFailures < this.servers) return;
        // A whole pass failed to connect.
        if (this.mode === "try") this.finished = "give_up";
        else this.pause();
        return;
      case "requeue":
        if (this.mode === "try") {
          this.finished = "give_up";
          return;
        }
        this.cursor = (this.cursor + 1) % this.servers;
        // A long wait in the queue shows a healthy server: start over.
        if (queuedMs >= RETRY.resetAfterQueuedMs) this.backoffs = 0;
        this.pause();
        return;
    }
  }

  private pause(): void {
    this.sleepNext = true;
    this.connectFailures = 0;
  }
}
