// Conformance driver for the Node client: JSON-line commands on stdin,
// JSON-line events on stdout (see docs/writing-a-client.md). It uses the
// package's public API only, imported by its own name.
import { readFileSync, writeSync } from "node:fs";
import { createInterface } from "node:readline";
import {
  AcquireAbortedError,
  AcquireTimeoutError,
  Client,
  ConnectionError,
  LockBusyError,
  LockLostError,
  ServerError,
} from "monolock";

const started = performance.now();
/** id -> { controller, lock, pending }, or RELEASED once released */
const claims = new Map();
/**
 * What a released id keeps: nothing of its lock (a benchmark makes many
 * thousands), yet a second release still answers `released`.
 */
const RELEASED = Object.freeze({ released: true, pending: false, lock: undefined });
/** Clients by their settings: a Client holds configuration only. */
const clients = new Map();

/** Set once a write to stdout would block: from then on all of them go through process.stdout, in order. */
let stdoutStream = false;

/**
 * Writes one line to stdout at once, with one write(2): events carry the
 * time they happened, and process.stdout's stream machinery costs more than
 * the write itself.
 */
function writeLine(line) {
  if (!stdoutStream) {
    const bytes = Buffer.from(line);
    let done = 0;
    try {
      while (done < bytes.length) done += writeSync(1, bytes, done);
      return;
    } catch (err) {
      if (err?.code !== "EAGAIN") throw err;
      stdoutStream = true;
      process.stdout.write(bytes.subarray(done));
      return;
    }
  }
  process.stdout.write(line);
}

function emit(event) {
  event.t_ms = Math.round((performance.now() - started) * 1000) / 1000;
  writeLine(`${JSON.stringify(event)}\n`);
}

function log(message) {
  process.stderr.write(`node-driver: ${message}\n`);
}

/** The pipe protocol's error kind for a rejected acquisition. */
function errorKind(err) {
  if (err instanceof ServerError) return err.origin === "client" ? "validation" : "server";
  if (err instanceof LockBusyError) return "busy";
  if (err instanceof AcquireTimeoutError) return "timeout";
  if (err instanceof AcquireAbortedError) return "cancelled";
  if (err instanceof ConnectionError) return "connect";
  return undefined;
}

function describe(err) {
  return { code: err.code, temporary: err.code === null ? null : err.temporary, message: err.message };
}

/** `tls.connect` options from the command's tls object (PEM files, server name). */
function tlsOptions(t) {
  if (t == null) return undefined;
  return {
    ...(t.ca_file == null ? {} : { ca: readFileSync(t.ca_file) }),
    ...(t.cert_file == null ? {} : { cert: readFileSync(t.cert_file) }),
    ...(t.key_file == null ? {} : { key: readFileSync(t.key_file) }),
    ...(t.server_name == null ? {} : { servername: t.server_name }),
  };
}

function acquire(cmd) {
  const { id } = cmd;
  const existing = claims.get(id);
  if (existing && (existing.pending || existing.lock?.state === "held")) {
    emit({ event: "driver_error", message: `id ${id} is already in use` });
    return;
  }
  const key = JSON.stringify([cmd.servers, cmd.lease_ms, cmd.connect_timeout_ms, cmd.tls]);
  let client = clients.get(key);
  if (client === undefined) {
    try {
      client = new Client({
        servers: cmd.servers,
        leaseMs: cmd.lease_ms,
        ...(cmd.connect_timeout_ms == null ? {} : { connectTimeoutMs: cmd.connect_timeout_ms }),
        ...(cmd.tls == null ? {} : { tls: tlsOptions(cmd.tls) }),
      });
    } catch (err) {
      emit({ event: "driver_error", message: String(err?.message ?? err) });
      return;
    }
    clients.set(key, client);
  }
  const name = typeof cmd.name_hex === "string" ? new Uint8Array(Buffer.from(cmd.name_hex, "hex")) : cmd.name;
  const controller = new AbortController();
  const claim = { controller, lock: undefined, pending: true };
  claims.set(id, claim);
  const options = {
    signal: controller.signal,
    ...(cmd.timeout_ms == null ? {} : { timeoutMs: cmd.timeout_ms }),
  };
  const attempt =
    cmd.mode === "try"
      ? client.tryAcquire(name, options)
      : client.acquire(name, { ...options, onWaiting: () => emit({ event: "waiting", id }) });
  attempt.then(
    (lock) => {
      claim.pending = false;
      claim.lock = lock;
      emit({ event: "acquired", id, token: lock.token.toString(), valid_ms: lock.validUntil - performance.now() });
      // The push signal, not a poll: the runner times when it fires.
      const onAbort = () => {
        const lost = lock.signal.reason;
        if (lost instanceof LockLostError) emit({ event: "lost", id, kind: lost.kind, ...describe(lost) });
      };
      if (lock.signal.aborted) onAbort();
      else lock.signal.addEventListener("abort", onAbort, { once: true });
    },
    (err) => {
      claim.pending = false;
      const kind = errorKind(err);
      if (kind === undefined) {
        emit({ event: "driver_error", message: `id ${id}: ${String(err?.stack ?? err)}` });
        return;
      }
      emit({ event: "error", id, kind, ...describe(err) });
    },
  );
}

async function release(cmd) {
  const claim = claims.get(cmd.id);
  if (claim === RELEASED) {
    emit({ event: "released", id: cmd.id });
    return;
  }
  if (!claim?.lock) {
    emit({ event: "driver_error", message: `release: no lock for id ${cmd.id}` });
    return;
  }
  await claim.lock.release();
  // Unless the id was acquired again meanwhile.
  if (claims.get(cmd.id) === claim) claims.set(cmd.id, RELEASED);
  emit({ event: "released", id: cmd.id });
}

function cancel(cmd) {
  const claim = claims.get(cmd.id);
  if (claim?.pending) claim.controller.abort(new Error("cancelled by the runner"));
  else log(`cancel: nothing pending for id ${cmd.id}`);
}

let quitting = false;
async function quit() {
  if (quitting) return;
  quitting = true;
  for (const claim of claims.values()) {
    if (claim.pending) claim.controller.abort(new Error("driver quitting"));
  }
  await Promise.all([...claims.values()].map((c) => c.lock?.release()));
  // Nothing should keep the process alive now; this only guards against a bug.
  setTimeout(() => {
    log("still alive 2 s after quit; exiting");
    process.exit(0);
  }, 2000).unref();
}

const lines = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
lines.on("line", (line) => {
  if (line.trim() === "" || quitting) return;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch {
    emit({ event: "driver_error", message: `not JSON: ${line}` });
    return;
  }
  switch (cmd?.cmd) {
    case "acquire":
      return acquire(cmd);
    case "release":
      return void release(cmd).catch((err) => emit({ event: "driver_error", message: String(err) }));
    case "cancel":
      return cancel(cmd);
    case "quit":
      lines.close();
      return;
    default:
      emit({ event: "driver_error", message: `unknown command: ${line}` });
  }
});
lines.on("close", () => void quit());

emit({ event: "ready", client: "node", capabilities: ["cancel", "invalid_utf8_names", "tls"] });
