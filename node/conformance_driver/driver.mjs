// Conformance driver for the Node client: JSON-line commands on stdin,
// JSON-line events on stdout (see docs/writing-a-client.md). It uses the
// package's public API only, imported by its own name.
import { readFileSync, writeSync } from "node:fs";
import {
  AcquireAbortedError,
  AcquireTimeoutError,
  Client,
  ConnectionError,
  LockBusyError,
  LockLostError,
  LockReleasedError,
  NoValueError,
  ServerEndedError,
  ServerError,
} from "monolock";

const started = performance.now();
/** id -> { controller, lock, pending, settled }, or RELEASED once released */
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
 * Lines up to this many UTF-16 units (at most 3 bytes each in UTF-8) fit in
 * PIPE_BUF (4096 bytes): a pipe writes them whole or not at all.
 */
const ATOMIC_LINE_UNITS = 1024;

/**
 * Writes one line to stdout at once, with one write(2): events carry the
 * time they happened, and process.stdout's stream machinery costs more than
 * the write itself. A short line is written as a string (no Buffer to make):
 * it goes out whole, or (EAGAIN) not at all.
 */
function writeLine(line) {
  if (!stdoutStream) {
    if (line.length <= ATOMIC_LINE_UNITS) {
      let written = 0;
      try {
        written = writeSync(1, line);
      } catch (err) {
        if (err?.code !== "EAGAIN") throw err;
        stdoutStream = true;
        process.stdout.write(line);
        return;
      }
      if (written === Buffer.byteLength(line)) return;
      // A partial write (stdout is neither a pipe nor a file): the rest as bytes.
      stdoutStream = true;
      process.stdout.write(Buffer.from(line).subarray(written));
      return;
    }
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
  if (err instanceof ServerEndedError) return "server"; // an ERROR whose code never came: code null
  if (err instanceof ConnectionError) return "connect";
  if (err instanceof NoValueError) return "validation"; // a proclaim on a claim without a value: nothing sent
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

/**
 * Clients of the common command (one server, the default connect timeout,
 * no TLS) by lease and server, found without serialising a key.
 */
const plainClients = new Map();

/** The name of an acquire or observe: name_hex's raw bytes (any, invalid UTF-8 too), else name. */
function nameOf(cmd) {
  return typeof cmd.name_hex === "string" ? new Uint8Array(Buffer.from(cmd.name_hex, "hex")) : cmd.name;
}

/** The Client for the command's settings (made on first use), or undefined after a driver_error. */
function clientFor(cmd) {
  const { servers, lease_ms: leaseMs } = cmd;
  const plain =
    cmd.connect_timeout_ms == null &&
    cmd.tls == null &&
    Array.isArray(servers) &&
    servers.length === 1 &&
    typeof servers[0] === "string" &&
    typeof leaseMs === "number";
  const cache = plain ? plainClients : clients;
  const key = plain ? `${leaseMs} ${servers[0]}` : JSON.stringify([servers, leaseMs, cmd.connect_timeout_ms, cmd.tls]);
  let client = cache.get(key);
  if (client === undefined) {
    try {
      client = new Client({
        servers,
        leaseMs,
        ...(cmd.connect_timeout_ms == null ? {} : { connectTimeoutMs: cmd.connect_timeout_ms }),
        ...(cmd.tls == null ? {} : { tls: tlsOptions(cmd.tls) }),
      });
    } catch (err) {
      emit({ event: "driver_error", message: String(err?.message ?? err) });
      return undefined;
    }
    cache.set(key, client);
  }
  return client;
}

/**
 * AbortControllers of settled acquisitions that were never aborted. A
 * settled acquisition has dropped its listener, so its controller can serve
 * the next one: making an AbortSignal costs more than the rest of a command.
 */
const spareControllers = [];

/** id -> { opening, session }: session commands (protocol version 4), kept after their release. */
const sessions = new Map();

/** The session command: opens a session, prints `opened` once its SESSION_OK came, or the error. */
function openSession(cmd) {
  const { id } = cmd;
  if (sessions.has(id) || claims.has(id) || observers.has(id)) {
    emit({ event: "driver_error", message: `id ${id} is already used` });
    return;
  }
  const client = clientFor(cmd);
  if (client === undefined) return;
  const entry = { session: undefined, opening: undefined };
  entry.opening = client.session({ leaseMs: cmd.lease_ms }).then(
    (session) => {
      entry.session = session;
      emit({ event: "opened", id });
      return session;
    },
    (err) => {
      failed(id, err);
      return undefined;
    },
  );
  sessions.set(id, entry);
}

/** Closes a session (releasing what it holds, nothing told lost) and prints `released`. */
async function closeSession(id, entry) {
  const session = entry.session ?? (await entry.opening);
  await session?.close();
  emit({ event: "released", id });
}

function acquire(cmd) {
  const { id } = cmd;
  const existing = claims.get(id);
  if (existing && (existing.pending || existing.lock?.state === "held")) {
    emit({ event: "driver_error", message: `id ${id} is already in use` });
    return;
  }
  let client;
  if (cmd.session != null) {
    // The claim goes on the session: its servers and lease are the session's.
    const entry = sessions.get(cmd.session);
    if (entry === undefined) {
      emit({ event: "driver_error", message: `acquire ${id}: no session ${cmd.session}` });
      return;
    }
    client = entry.session ?? sessionLater(entry);
  } else {
    client = clientFor(cmd);
  }
  if (client === undefined) return;
  const name = nameOf(cmd);
  const controller = spareControllers.pop() ?? new AbortController();
  const claim = { controller, lock: undefined, pending: true };
  claims.set(id, claim);
  const settled = () => {
    claim.pending = false;
    if (!controller.signal.aborted) spareControllers.push(controller);
  };
  const timeoutMs = cmd.timeout_ms == null ? undefined : cmd.timeout_ms;
  // Optional: "shared" (absent = false), "limit" (absent or 0 = no limit)
  // and the claim's value as "value" (UTF-8 text) or "value_hex" (absent or
  // empty = none).
  const shared = cmd.shared == null ? undefined : cmd.shared;
  const limit = cmd.limit == null || cmd.limit === 0 ? undefined : cmd.limit;
  const value =
    typeof cmd.value_hex === "string" ? new Uint8Array(Buffer.from(cmd.value_hex, "hex")) : (cmd.value ?? undefined);
  const attempt =
    cmd.mode === "try"
      ? client.tryAcquire(name, { signal: controller.signal, timeoutMs, shared, limit, value })
      : client.acquire(name, {
          signal: controller.signal,
          timeoutMs,
          shared,
          limit,
          value,
          onWaiting: () => emit({ event: "waiting", id }),
        });
  // Settled once the outcome is out: a proclaim waits for it.
  claim.settled = attempt.then(
    (lock) => {
      settled();
      claim.lock = lock;
      emit({ event: "acquired", id, token: lock.token.toString(), valid_ms: lock.validUntil - performance.now() });
      // The push signal, not a poll: the runner times when it fires.
      const { signal } = lock;
      const onAbort = () => {
        const lost = signal.reason;
        if (lost instanceof LockLostError) emit({ event: "lost", id, kind: lost.kind, ...describe(lost) });
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    },
    (err) => {
      settled();
      failed(id, err);
    },
  );
}

/** A stand-in for a session still opening: its calls wait for it (in order) and fail as a closed one would. */
function sessionLater(entry) {
  const on = (method) => (name, options) =>
    entry.opening.then((session) => {
      if (session === undefined) throw new ConnectionError("the session did not open", "connect");
      return session[method](name, options);
    });
  return { acquire: on("acquire"), tryAcquire: on("tryAcquire") };
}

async function release(cmd) {
  const entry = sessions.get(cmd.id);
  if (entry !== undefined) {
    await closeSession(cmd.id, entry);
    return;
  }
  const observer = observers.get(cmd.id);
  if (observer !== undefined) {
    // Nothing of the observation may follow its released event.
    observer.controller.abort();
    await observer.done;
    emit({ event: "released", id: cmd.id });
    return;
  }
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

/**
 * The proclaim command: once the claim's acquisition has ended, replace the
 * lock's value and print `proclaimed` when the server has acknowledged it.
 */
function proclaim(cmd) {
  const claim = claims.get(cmd.id);
  if (claim === undefined || typeof cmd.value !== "string") {
    emit({ event: "driver_error", message: `proclaim needs the id of a claim and a value: ${cmd.id}` });
    return;
  }
  void proclaimOn(cmd.id, claim, cmd.value).catch((err) => emit({ event: "driver_error", message: String(err) }));
}

async function proclaimOn(id, claim, value) {
  await claim.settled;
  const { lock } = claim;
  if (lock === undefined) return; // never granted (its error event said so), or released
  try {
    await lock.proclaim(value);
  } catch (err) {
    // A lock that ended says so with its own lost or released event.
    if (err instanceof LockLostError || err instanceof LockReleasedError) return;
    failed(id, err);
    return;
  }
  emit({ event: "proclaimed", id });
}

/** Prints the error event of a failed command, or a driver_error for an error the pipe has no kind for. */
function failed(id, err) {
  const kind = errorKind(err);
  if (kind === undefined) emit({ event: "driver_error", message: `id ${id}: ${String(err?.stack ?? err)}` });
  else emit({ event: "error", id, kind, ...describe(err) });
}

/** id -> { controller, done }: observe commands, kept after their release so a second one answers too. */
const observers = new Map();

/** The pipe's words for the client's leader states. */
const OBSERVED_STATES = { leader: "leader", "no-leader": "none", "held-back": "held_back", unknown: "unknown" };

/**
 * An observation as an observed event. Unknown vouches for nothing, so it
 * names no token, value or count. Token and value go together and only for
 * a term: a hold with token 0 waits for leaders the server does not know.
 */
function observedEvent(id, o) {
  const event = { event: "observed", id, state: OBSERVED_STATES[o.state] };
  if (o.state === "unknown") return event;
  if (o.token !== 0n) {
    event.token = o.token.toString();
    event.value = Buffer.from(o.value.buffer, o.value.byteOffset, o.value.byteLength).toString();
  }
  event.candidates = o.candidates;
  return event;
}

/** The observe command: follows the name's leader until its release (or quit). */
function observe(cmd) {
  const { id } = cmd;
  if (observers.has(id) || claims.has(id)) {
    emit({ event: "driver_error", message: `id ${id} is already used` });
    return;
  }
  const client = clientFor(cmd);
  if (client === undefined) return;
  const controller = new AbortController();
  const done = follow(id, client, nameOf(cmd), controller.signal).catch((err) =>
    emit({ event: "driver_error", message: `id ${id}: ${String(err?.stack ?? err)}` }),
  );
  observers.set(id, { controller, done });
}

/**
 * Prints the observations of one name. The client also tells changes the
 * pipe has no field for (the leader's identity, the end of a hold): those
 * repeat the last event, and a runner could not tell the repeat from a new
 * change, so they are not printed. The first event is a known picture.
 */
async function follow(id, client, name, signal) {
  let last;
  try {
    for await (const o of client.observe(name, { signal })) {
      if (signal.aborted) return; // released: the generator's return closes the watch
      const event = observedEvent(id, o);
      const key = JSON.stringify(event);
      if (key === last || (last === undefined && event.state === "unknown")) continue;
      last = key;
      emit(event);
    }
  } catch (err) {
    if (!signal.aborted) failed(id, err);
  }
}

let quitting = false;
async function quit() {
  if (quitting) return;
  quitting = true;
  for (const claim of claims.values()) {
    if (claim.pending) claim.controller.abort(new Error("driver quitting"));
  }
  for (const observer of observers.values()) observer.controller.abort();
  await Promise.all([...claims.values()].map((c) => c.lock?.release()));
  await Promise.all([...sessions.values()].map((e) => e.opening.then((s) => s?.close())));
  await Promise.all([...observers.values()].map((o) => o.done));
  // Nothing should keep the process alive now; this only guards against a bug.
  setTimeout(() => {
    log("still alive 2 s after quit; exiting");
    process.exit(0);
  }, 2000).unref();
}

/** Handles one command line. */
function onLine(line) {
  if (quitting || line.trim() === "") return;
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
    case "proclaim":
      return proclaim(cmd);
    case "observe":
      return observe(cmd);
    case "session":
      return openSession(cmd);
    case "quit":
      stopReading();
      return;
    default:
      emit({ event: "driver_error", message: `unknown command: ${line}` });
  }
}

/**
 * Splits a chunk of text into lines at "\n", "\r\n" or a lone "\r", as
 * readline does (its interface costs more than the commands it carries).
 */
function onText(text) {
  if (text.indexOf("\r") === -1) {
    onLine(text);
    return;
  }
  for (const line of text.split(/\r\n|\r/)) onLine(line);
}

/** Bytes of a command line whose end has not arrived yet. */
let partial;
let reading = true;

function stopReading() {
  if (!reading) return;
  reading = false;
  partial = undefined;
  process.stdin.pause();
  void quit();
}

process.stdin.on("data", (chunk) => {
  if (!reading) return;
  let start = 0;
  let end = chunk.indexOf(10);
  if (partial !== undefined && end !== -1) {
    const head = partial;
    partial = undefined;
    onText(Buffer.concat([head, chunk.subarray(0, end)]).toString());
    start = end + 1;
    end = chunk.indexOf(10, start);
  }
  while (end !== -1 && reading) {
    onText(chunk.toString("utf8", start, end));
    start = end + 1;
    end = chunk.indexOf(10, start);
  }
  if (start < chunk.length && reading) {
    const rest = chunk.subarray(start);
    partial = partial === undefined ? Buffer.from(rest) : Buffer.concat([partial, rest]);
  }
});
process.stdin.on("end", () => {
  if (partial !== undefined && reading) onText(partial.toString());
  stopReading();
});

emit({
  event: "ready",
  client: "node",
  capabilities: ["cancel", "election", "invalid_utf8_names", "sessions", "shared", "tls"],
});
