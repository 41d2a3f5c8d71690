package conformance_driver;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import monolock.Canceller;
import monolock.Client;
import monolock.Config;
import monolock.Lock;
import monolock.Monolock;
import monolock.Session;

/**
 * Conformance driver for the gomobile Java binding: speaks the pipe protocol
 * of docs/writing-a-client.md (JSON lines; commands on stdin, events on
 * stdout) using only the generated public API of package monolock.
 */
public final class Driver {
	private static final PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);

	/** Held (or lost) locks by command id. */
	private static final Map<String, Lock> locks = new ConcurrentHashMap<>();
	/** Cancellers of acquisitions by command id. */
	private static final Map<String, Canceller> cancellers = new ConcurrentHashMap<>();
	/** Running observe commands by id. */
	private static final Map<String, Observation> observations = new ConcurrentHashMap<>();
	/** Sessions by command id. */
	private static final Map<String, Sessions.Entry> sessions = new ConcurrentHashMap<>();

	public static void main(String[] args) throws Exception {
		emit("{\"event\":\"ready\",\"client\":\"java-gomobile\",\"capabilities\":[\"cancel\",\"election\",\"sessions\",\"shared\",\"tls\"]}");
		BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
		String line;
		while ((line = in.readLine()) != null) {
			if (line.isBlank()) {
				continue;
			}
			try {
				if (!handle(line)) {
					break;
				}
			} catch (RuntimeException e) {
				emit("{\"event\":\"driver_error\",\"message\":" + Json.quote(e.toString()) + "}");
			}
		}
		for (Observation o : observations.values()) {
			o.stop();
		}
		Sessions.closeAll(sessions.values()); // their locks go with them, quietly
		for (Lock l : locks.values()) {
			l.unlock();
		}
		out.flush();
		// Exit explicitly: the Go runtime's threads must not keep the JVM up.
		System.exit(0);
	}

	/** Runs one command; false on quit. */
	@SuppressWarnings("unchecked")
	private static boolean handle(String line) {
		Object parsed = Json.parse(line);
		if (!(parsed instanceof Map)) {
			throw new IllegalArgumentException("command is not a JSON object");
		}
		Map<String, Object> cmd = (Map<String, Object>) parsed;
		String name = String.valueOf(cmd.get("cmd"));
		String id = cmd.get("id") instanceof String s ? s : null;
		switch (name) {
			case "quit":
				return false;
			case "acquire":
				requireId(id, cmd);
				if (cmd.get("session") instanceof String sid) {
					Sessions.Entry entry = sessions.get(sid);
					if (entry == null) {
						throw new IllegalArgumentException("acquire " + id + ": unknown session " + sid);
					}
					Canceller sc = new Canceller();
					cancellers.put(id, sc);
					Sessions.Claim claim = entry.add(id, String.valueOf(cmd.get("name")), "wait".equals(cmd.get("mode")));
					Thread st = new Thread(() -> acquireOnSession(id, cmd, sc, entry, claim), "acquire-" + id);
					st.setDaemon(true);
					st.start();
					return true;
				}
				Canceller cancel = new Canceller();
				cancellers.put(id, cancel);
				Thread t = new Thread(() -> acquire(id, cmd, cancel), "acquire-" + id);
				t.setDaemon(true);
				t.start();
				return true;
			case "session": {
				requireId(id, cmd);
				if (sessions.containsKey(id) || locks.containsKey(id) || observations.containsKey(id)) {
					throw new IllegalArgumentException("session: id " + id + " is already used");
				}
				Sessions.Entry entry = new Sessions.Entry(id);
				Config cfg = config(cmd);
				if (cmd.get("connect_timeout_ms") != null) {
					cfg.setDialTimeoutMillis(number(cmd.get("connect_timeout_ms"), "connect_timeout_ms"));
				}
				cfg.setWaiting(entry::waiting);
				sessions.put(id, entry);
				long timeout = timeoutMillis(cmd);
				Thread opener = new Thread(() -> entry.open(cfg, timeout), "session-" + id);
				opener.setDaemon(true);
				opener.start();
				return true;
			}
			case "observe":
				requireId(id, cmd);
				observe(id, cmd);
				return true;
			case "proclaim":
				requireId(id, cmd);
				proclaim(id, cmd);
				return true;
			case "release": {
				requireId(id, cmd);
				Observation o = observations.remove(id);
				if (o != null) {
					o.stop();
					emit(event("released", id));
					return true;
				}
				Sessions.Entry entry = sessions.get(id);
				if (entry != null) {
					entry.close();
					emit(event("released", id));
					return true;
				}
				Lock l = locks.remove(id);
				if (l == null) {
					throw new IllegalArgumentException("release: no lock for id " + id);
				}
				l.unlock();
				emit(event("released", id));
				return true;
			}
			case "cancel": {
				requireId(id, cmd);
				Canceller c = cancellers.get(id);
				if (c == null) {
					throw new IllegalArgumentException("cancel: no acquisition for id " + id);
				}
				c.cancel();
				return true;
			}
			default:
				throw new IllegalArgumentException("unknown command " + name);
		}
	}

	private static void requireId(String id, Map<String, Object> cmd) {
		if (id == null) {
			throw new IllegalArgumentException("command without an id: " + cmd.get("cmd"));
		}
	}

	/** Runs an acquire command on its own thread, reporting the outcome as events. */
	private static void acquire(String id, Map<String, Object> cmd, Canceller cancel) {
		try {
			if (cmd.containsKey("name_hex")) {
				throw new IllegalArgumentException("name_hex needs the invalid_utf8_names capability");
			}
			Config cfg = config(cmd);
			if (cmd.get("connect_timeout_ms") != null) {
				cfg.setDialTimeoutMillis(number(cmd.get("connect_timeout_ms"), "connect_timeout_ms"));
			}
			cfg.setWaiting(lockName -> emit(event("waiting", id)));
			Lock lock;
			try {
				lock = take(new Client(cfg), String.valueOf(cmd.get("name")), cmd, cancel);
			} catch (RuntimeException e) {
				throw e; // the driver's own fault (a command it cannot run), not the client's: driver_error
			} catch (Exception e) {
				emit(failure("error", id, e));
				return;
			}
			locks.put(id, lock);
			emit("{\"event\":\"acquired\",\"id\":" + Json.quote(id) + ",\"token\":" + Json.quote(lock.tokenString())
					+ ",\"valid_ms\":" + lock.validForMillis() + "}");
			// Set after the acquired event, so that lost always follows it; a
			// loss before this point is reported at once. Temporary is the
			// protocol's rule: a code below 0x10.
			lock.setLostListener((code, reason) -> emit(failure("lost", id, lock.lostKind(), code,
					code == Monolock.NoCode ? null : code < 0x10, reason)));
		} catch (RuntimeException e) {
			emit("{\"event\":\"driver_error\",\"message\":" + Json.quote(id + ": " + e) + "}");
		}
	}

	/**
	 * Runs an acquire command on a session, on its own thread: the same
	 * events as an acquire of its own, none once the session was closed.
	 */
	private static void acquireOnSession(String id, Map<String, Object> cmd, Canceller cancel, Sessions.Entry entry,
			Sessions.Claim claim) {
		try {
			if (cmd.containsKey("name_hex")) {
				throw new IllegalArgumentException("name_hex needs the invalid_utf8_names capability");
			}
			Lock lock;
			try {
				Session s = entry.await();
				lock = takeOnSession(s, String.valueOf(cmd.get("name")), cmd, cancel);
			} catch (RuntimeException e) {
				throw e;
			} catch (Exception e) {
				if (!entry.isClosed()) {
					emit(failure("error", id, e));
				}
				return;
			} finally {
				entry.returned(claim);
			}
			if (entry.isClosed()) { // closed while the grant was on its way
				lock.unlock();
				return;
			}
			locks.put(id, lock);
			emit("{\"event\":\"acquired\",\"id\":" + Json.quote(id) + ",\"token\":" + Json.quote(lock.tokenString())
					+ ",\"valid_ms\":" + lock.validForMillis() + "}");
			lock.setLostListener((code, reason) -> emit(failure("lost", id, lock.lostKind(), code,
					code == Monolock.NoCode ? null : code < 0x10, reason)));
		} catch (RuntimeException e) {
			emit("{\"event\":\"driver_error\",\"message\":" + Json.quote(id + ": " + e) + "}");
		}
	}

	/** take on a session: the same claims, without a connection of their own. */
	private static Lock takeOnSession(Session s, String lockName, Map<String, Object> cmd, Canceller cancel)
			throws Exception {
		boolean shared = Boolean.TRUE.equals(cmd.get("shared"));
		long permits = cmd.get("limit") == null ? 0 : number(cmd.get("limit"), "limit");
		boolean tryOnly = "try".equals(cmd.get("mode"));
		if (cmd.get("value") instanceof String value && !value.isEmpty()) {
			if (tryOnly || shared || permits != 0) {
				throw new IllegalArgumentException("the binding campaigns only in wait mode, exclusively");
			}
			return s.campaign(lockName, value, timeoutMillis(cmd), cancel);
		}
		if (tryOnly) {
			return permits != 0 ? s.tryAcquireSemaphore(lockName, permits)
					: shared ? s.tryAcquireShared(lockName) : s.tryAcquire(lockName);
		}
		long ms = timeoutMillis(cmd);
		return permits != 0 ? s.acquireSemaphore(lockName, permits, ms, cancel)
				: shared ? s.acquireShared(lockName, ms, cancel) : s.acquire(lockName, ms, cancel);
	}

	/** The client settings an acquire and an observe share: servers, lease, tls. */
	private static Config config(Map<String, Object> cmd) {
		Config cfg = new Config();
		cfg.setServers(String.join(",", strings(cmd.get("servers"))));
		cfg.setLeaseMillis(number(cmd.get("lease_ms"), "lease_ms"));
		if (cmd.get("tls") != null) {
			configureTls(cfg, cmd.get("tls"));
		}
		return cfg;
	}

	/** Takes the claim the acquire asks for: a campaign, a semaphore, shared or exclusive. */
	private static Lock take(Client client, String lockName, Map<String, Object> cmd, Canceller cancel) throws Exception {
		boolean shared = Boolean.TRUE.equals(cmd.get("shared"));
		long permits = cmd.get("limit") == null ? 0 : number(cmd.get("limit"), "limit");
		boolean tryOnly = "try".equals(cmd.get("mode"));
		// An empty value is none, as in the Go client: a plain claim.
		if (cmd.get("value") instanceof String value && !value.isEmpty()) {
			if (tryOnly || shared || permits != 0) {
				throw new IllegalArgumentException("the binding campaigns only in wait mode, exclusively");
			}
			return client.campaign(lockName, value, timeoutMillis(cmd), cancel);
		}
		if (tryOnly) {
			return permits != 0 ? client.tryAcquireSemaphore(lockName, permits)
					: shared ? client.tryAcquireShared(lockName) : client.tryAcquire(lockName);
		}
		long ms = timeoutMillis(cmd);
		return permits != 0 ? client.acquireSemaphore(lockName, permits, ms, cancel)
				: shared ? client.acquireShared(lockName, ms, cancel) : client.acquire(lockName, ms, cancel);
	}

	/** The wait's timeout_ms, or NoTimeout when absent. */
	private static long timeoutMillis(Map<String, Object> cmd) {
		Object timeout = cmd.get("timeout_ms");
		return timeout == null ? Monolock.NoTimeout : Math.max(0, number(timeout, "timeout_ms"));
	}

	/** Starts an observe command; its events come from its own thread and the Go runtime's. */
	private static void observe(String id, Map<String, Object> cmd) {
		if (locks.containsKey(id) || cancellers.containsKey(id) || observations.containsKey(id)) {
			throw new IllegalArgumentException("observe: id " + id + " is already used");
		}
		Client client;
		try {
			client = new Client(config(cmd));
		} catch (Exception e) {
			emit(failure("error", id, e));
			return;
		}
		Observation o = new Observation(id);
		observations.put(id, o);
		String name = String.valueOf(cmd.get("name"));
		Thread t = new Thread(() -> o.run(client, name), "observe-" + id);
		t.setDaemon(true);
		t.start();
	}

	/**
	 * Runs a proclaim command: proclaimed once the server has the value. It
	 * waits for the server, so it runs on its own thread. A lock that ends
	 * first says so with its lost event alone.
	 */
	private static void proclaim(String id, Map<String, Object> cmd) {
		Lock lock = locks.get(id);
		if (lock == null || !(cmd.get("value") instanceof String value)) {
			throw new IllegalArgumentException("proclaim needs the id of a held lock and a value");
		}
		Thread t = new Thread(() -> {
			try {
				lock.proclaim(value);
				emit(event("proclaimed", id));
			} catch (Exception e) {
				if (!lock.isLost()) {
					emit(failure("error", id, e));
				}
			}
		}, "proclaim-" + id);
		t.setDaemon(true);
		t.start();
	}

	/** Applies the command's tls object: PEM files and the server name. */
	@SuppressWarnings("unchecked")
	private static void configureTls(Config cfg, Object tls) {
		if (!(tls instanceof Map)) {
			throw new IllegalArgumentException("tls must be an object");
		}
		Map<String, Object> t = (Map<String, Object>) tls;
		cfg.setUseTLS(true);
		if (t.get("ca_file") != null) {
			cfg.setRootCAsPEM(readFile(t.get("ca_file")));
		}
		if (t.get("cert_file") != null) {
			cfg.setClientCertPEM(readFile(t.get("cert_file")));
		}
		if (t.get("key_file") != null) {
			cfg.setClientKeyPEM(readFile(t.get("key_file")));
		}
		if (t.get("server_name") != null) {
			cfg.setServerName(String.valueOf(t.get("server_name")));
		}
	}

	private static byte[] readFile(Object path) {
		try {
			return Files.readAllBytes(Path.of(String.valueOf(path)));
		} catch (IOException e) {
			throw new UncheckedIOException(e);
		}
	}

	static String event(String name, String id) {
		return "{\"event\":" + Json.quote(name) + ",\"id\":" + Json.quote(id) + "}";
	}

	/** The error event of a call that failed, classified by the binding. */
	static String failure(String event, String id, Exception e) {
		long code = Monolock.errorCode(e);
		return failure(event, id, Monolock.errorKind(e), code, code == Monolock.NoCode ? null : Monolock.errorTemporary(e),
				e.getMessage());
	}

	static String failure(String event, String id, String kind, long code, Boolean temporary, String message) {
		return "{\"event\":" + Json.quote(event) + ",\"id\":" + Json.quote(id) + ",\"kind\":" + Json.quote(kind)
				+ ",\"code\":" + (code == Monolock.NoCode ? "null" : Long.toString(code))
				+ ",\"temporary\":" + temporary
				+ ",\"message\":" + Json.quote(message == null ? "" : message) + "}";
	}

	private static List<String> strings(Object v) {
		if (!(v instanceof List<?> l)) {
			throw new IllegalArgumentException("servers must be a list of strings");
		}
		return l.stream().map(String::valueOf).toList();
	}

	/** Reads a JSON number as a long; values beyond long are clamped (they are invalid either way). */
	private static long number(Object v, String field) {
		if (v instanceof Long n) {
			return n;
		}
		if (v instanceof Double d) {
			return d >= Long.MAX_VALUE ? Long.MAX_VALUE : d <= Long.MIN_VALUE ? Long.MIN_VALUE : d.longValue();
		}
		throw new IllegalArgumentException(field + " must be a number");
	}

	static synchronized void emit(String json) {
		out.println(json);
		out.flush();
	}
}
