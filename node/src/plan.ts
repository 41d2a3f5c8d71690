/**
 * The retry policy of one acquisition, as a pure plan (spec/constants.json
 * "retry", `spec/vectors/retry.json`): which server to connect to next,
 * when to sleep, when to give up. The caller runs each action and reports
 * the attempt's outcome; the caller's own deadline stays outside.
 */

import { backoffCeiling, backoffDelay } from "./backoff.js";
import { FIRST_TERMINAL_CODE, RETRY } from "./constants.js";
import type { Cause } from "./core.js";
import { NotActiveError } from "./errors.gen.js";

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
  | "busy"
  /**
   * The server's first byte starts no server message, or the TLS handshake
   * failed on a certificate: it leaves the rotation.
   */
  | "not_monolock"
  /**
   * A passive server of an HA cell answered ERROR 0x03 (NOT_ACTIVE); report
   * it with {@link RetryPlan.reportNotActive} to pass the server it named.
   */
  | "not_active";

/** The outcome of a claim that ended without a grant; `connected`: the connection had been opened. */
export function outcomeOf(cause: Cause, connected: boolean): Outcome {
  switch (cause.kind) {
    case "busy":
      return "busy";
    case "server":
      // No code (the session ended at the ERROR's type byte): no class, so like a dropped connection.
      if (cause.code === null) return "requeue";
      if (cause.code === NotActiveError.CODE) return "not_active";
      return cause.code >= FIRST_TERMINAL_CODE ? "terminal" : "requeue";
    case "io":
      return connected ? "requeue" : "connect_failed";
    case "not_monolock":
    case "certificate":
      // Either answers the same way next time: that server leaves the rotation.
      return "not_monolock";
    default:
      return "requeue";
  }
}

/**
 * One cursor over the servers, starting at the first; every failed attempt
 * moves it to the next (wrapping). A connect failure is retried at once
 * unless every server failed to connect since the last sleep; a server that
 * answered and then failed is always followed by a backoff sleep. A server
 * that does not speak monolock leaves the walk for good. A passive server
 * of an HA cell starts the backoff over and may send the cursor to the
 * leader it named. Try-acquire makes one pass, moving on after any failure
 * but busy or terminal, and never sleeps.
 */
export class RetryPlan {
  private cursor = 0;
  /** Servers that do not speak monolock, left out of the walk. */
  private readonly dropped: boolean[];
  private live: number;
  /** Sleeps since the backoff last started over. */
  private backoffs = 0;
  /** Servers that failed to connect since the last sleep; in try mode, that failed at all. */
  private failedInPass = 0;
  private sleepNext = false;
  /** The short pause after a passive answer comes next: delay_0, not a step of the backoff. */
  private pauseNext = false;
  private finished: "give_up" | "done" | undefined;

  constructor(
    private readonly servers: number,
    private readonly mode: "wait" | "try",
    private readonly random: () => number = Math.random,
  ) {
    if (!(servers >= 1)) throw new RangeError("monolock: no servers");
    this.dropped = new Array<boolean>(servers).fill(false);
    this.live = servers;
  }

  /** What to do now. */
  next(): PlanAction {
    if (this.finished !== undefined) return { type: this.finished };
    if (this.pauseNext) {
      // Drawn as the first delay; the backoff stays at its start after it.
      this.pauseNext = false;
      this.backoffs = 0;
      return { type: "sleep", ms: backoffDelay(0, this.random), ceilingMs: backoffCeiling(0) };
    }
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
      case "not_active":
        this.reportNotActive(undefined);
        return;
      case "granted":
        this.finished = "done";
        return;
      case "terminal":
      case "busy":
        this.finished = "give_up";
        return;
      case "not_monolock":
        this.dropped[this.cursor] = true;
        this.live--;
        // Retrying a wrong port only hides the mistake.
        if (this.live === 0) {
          this.finished = "give_up";
          return;
        }
        this.advance();
        // Dropping it may complete a pass of servers that failed to connect.
        this.endOfPass();
        return;
      case "connect_failed":
        this.advance();
        this.failedInPass++;
        this.endOfPass();
        return;
      case "requeue":
        this.advance();
        if (this.mode === "try") {
          // One pass: on to the next server (an HA cell's passive one says 0x01).
          this.failedInPass++;
          this.endOfPass();
          return;
        }
        // A long wait in the queue shows a healthy server: start over.
        if (queuedMs >= RETRY.resetAfterQueuedMs) this.backoffs = 0;
        this.pause();
        return;
    }
  }

  /**
   * Reports that a passive server of an HA cell refused the last `connect`
   * (ERROR 0x03), naming `leader`, the index of the active server in the
   * list (undefined: none of the list). A cell that answers is alive and
   * its election ends within its TTL, so the backoff starts over and the
   * pause is the first delay only; the next attempt goes to the leader if
   * it is still in the walk, else on as after any failure. Try-acquire
   * takes it as a requeue: its one pass goes on in list order.
   */
  reportNotActive(leader: number | undefined): void {
    if (this.mode === "try") {
      this.report("requeue");
      return;
    }
    this.backoffs = 0;
    this.failedInPass = 0;
    if (leader !== undefined && leader >= 0 && leader < this.servers && !this.dropped[leader]) this.cursor = leader;
    else this.advance();
    this.pauseNext = true;
  }

  /** After every server left failed (to connect, or in try mode at all): back off, or (try) give up. */
  private endOfPass(): void {
    if (this.failedInPass < this.live) return;
    if (this.mode === "try") this.finished = "give_up";
    else this.pause();
  }

  /** Moves the cursor to the next server still in the walk. */
  private advance(): void {
    do this.cursor = (this.cursor + 1) % this.servers;
    while (this.dropped[this.cursor]);
  }

  private pause(): void {
    this.sleepNext = true;
    this.failedInPass = 0;
  }
}
