package jvmtest;

import conformance_driver.Json;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import monolock.Canceller;
import monolock.Client;
import monolock.Config;
import monolock.Lock;
import monolock.Monolock;
import monolock.Session;

/**
 * Tests of the generated Java binding against the real server: what a Java
 * or Kotlin app sees. The Go package's own tests cover its logic; these
 * check that it survives the trip through gobind and JNI.
 */
public final class BindingTests implements AutoCloseable {
	/** Turns a hang into a failure; far above any expected delay. */
	private static final long BOUND_SECONDS = 15;

	private Server server;

	private Server server() throws Exception {
		if (server == null) {
			server = new Server();
		}
		return server;
	}

	@Override
	public void close() throws java.io.IOException {
		if (server != null) {
			server.close();
		}
	}

	private Client client(long leaseMillis) throws Exception {
		Config cfg = new Config();
		cfg.setServers(server().addr);
		cfg.setLeaseMillis(leaseMillis);
		return new Client(cfg);
	}

	@Test
	public void configStartsWithTheDefaults() {
		Config cfg = new Config();
		Check.equal("127.0.0.1:7117", cfg.getServers(), "servers");
		Check.equal(10000L, cfg.getLeaseMillis(), "lease");
		Check.equal(5000L, cfg.getDialTimeoutMillis(), "dial timeout");
		Check.equal(false, cfg.getUseTLS(), "TLS");
	}

	@Test
	public void acquireGivesATokenAndAValidity() throws Exception {
		Lock lock = client(10000).acquire("jvm/acquire", 10000, null);
		try {
			Check.equal("jvm/acquire", lock.name(), "name");
			Check.isTrue(lock.token() > 0, "token > 0, got " + lock.token());
			Check.equal(Long.toString(lock.token()), lock.tokenString(), "tokenString");
			Check.isTrue(lock.isHeld() && !lock.isLost(), "held, not lost");
			long validFor = lock.validForMillis();
			Check.isTrue(validFor > 5000 && validFor <= 8000, "validFor in (5000, 8000], got " + validFor);
			long until = lock.validUntilMillis() - System.currentTimeMillis();
			Check.isTrue(until > 4000 && until <= 9000, "validUntil about 8 s ahead, got " + until);
		} finally {
			lock.unlock();
		}
	}

	@Test
	public void tryAcquireOnAHeldLockIsBusy() throws Exception {
		Client c = client(10000);
		Lock held = c.tryAcquire("jvm/busy");
		try {
			Exception e = Check.fails(() -> c.tryAcquire("jvm/busy"), "tryAcquire of a held lock");
			Check.equal(Monolock.KindBusy, Monolock.errorKind(e), "kind");
			Check.equal(Monolock.NoCode, Monolock.errorCode(e), "code");
			Check.equal(false, Monolock.errorTemporary(e), "temporary");
			Check.isTrue(e.getMessage().contains("[busy]"), "message names the kind: " + e.getMessage());
		} finally {
			held.unlock();
		}
	}

	@Test
	public void sharedClaimsAndSemaphoresCrossTheBinding() throws Exception {
		Client c = client(10000);
		Lock r1 = c.acquireShared("jvm/rw", 10000, null);
		Lock r2 = c.tryAcquireShared("jvm/rw");
		try {
			Check.isTrue(r2.token() > r1.token(), "readers hold together, each with its own token");
			Exception busy = Check.fails(() -> c.tryAcquire("jvm/rw"), "a writer beside readers");
			Check.equal(Monolock.KindBusy, Monolock.errorKind(busy), "kind");
		} finally {
			r1.unlock();
			r2.unlock();
		}
		Lock permit = c.acquireSemaphore("jvm/pool", 1, 10000, null);
		try {
			Exception full = Check.fails(() -> c.tryAcquireSemaphore("jvm/pool", 1), "a second permit of one");
			Check.equal(Monolock.KindBusy, Monolock.errorKind(full), "kind");
			Exception mismatch = Check.fails(() -> c.tryAcquireSemaphore("jvm/pool", 2), "another limit");
			Check.equal(Monolock.KindServer, Monolock.errorKind(mismatch), "kind");
			Check.equal(0x1aL, Monolock.errorCode(mismatch), "code");
		} finally {
			permit.unlock();
		}
	}

	@Test
	public void sessionCarriesLocksUntilClose() throws Exception {
		Client c = client(10000);
		Client other = client(10000);
		Session s = c.openSession(10000);
		try {
			Check.isTrue(s.isOpen(), "open");
			Check.equal("", s.endKind(), "endKind while open");
			Check.isTrue(s.maxStreams() > 0, "maxStreams > 0, got " + s.maxStreams());
			Lock a = s.acquire("jvm/sess/a", 10000, null);
			Lock b = s.tryAcquire("jvm/sess/b");
			Check.isTrue(b.token() > a.token(), "tokens in the order sent");
			Check.isTrue(a.validForMillis() > 5000 && a.validForMillis() <= 8000, "validFor in (5000, 8000], got " + a.validForMillis());
			Exception busy = Check.fails(() -> other.tryAcquire("jvm/sess/a"), "tryAcquire of a lock the session holds");
			Check.equal(Monolock.KindBusy, Monolock.errorKind(busy), "kind");
			BlockingQueue<String> lost = new ArrayBlockingQueue<>(4);
			b.setLostListener((code, reason) -> lost.add(code + " " + reason));

			a.unlock(); // returns once the server let it go
			Lock again = other.tryAcquire("jvm/sess/a");
			Check.isTrue(again.token() > b.token(), "a larger token after the unlock");
			again.unlock();
			Check.isTrue(b.isHeld() && s.isOpen(), "unlocking one lock keeps the session and its other locks");

			s.close();
			Check.isTrue(!b.isHeld() && !b.isLost(), "close releases, it does not lose");
			Check.isTrue(!s.isOpen(), "closed");
			Check.equal(Monolock.SessionClosed, s.endKind(), "endKind after close");
			Lock freed = other.tryAcquire("jvm/sess/b");
			freed.unlock();
			Exception closed = Check.fails(() -> s.acquire("jvm/sess/c", 1000, null), "acquire on a closed session");
			Check.equal(Monolock.KindIO, Monolock.errorKind(closed), "kind");
			Check.equal(null, lost.poll(200, TimeUnit.MILLISECONDS), "no onLost for a lock the session's close released");
		} finally {
			s.close();
		}
		Session made = new Session(); // holds nothing, takes nothing
		Check.isTrue(!made.isOpen(), "a Session made in Java is closed");
		Exception e = Check.fails(() -> made.tryAcquire("jvm/sess/x"), "tryAcquire on a Session made in Java");
		Check.equal(Monolock.KindIO, Monolock.errorKind(e), "kind");
		made.close();
	}

	@Test
	public void aWaiterHearsWaitingAndGetsTheLockOnUnlock() throws Exception {
		Lock holder = client(10000).acquire("jvm/queue", Monolock.NoTimeout, null);
		BlockingQueue<String> waiting = new ArrayBlockingQueue<>(8);
		Config cfg = new Config();
		cfg.setServers(server().addr);
		cfg.setWaiting(name -> waiting.add(name + " on " + Thread.currentThread().getName()));
		Client c = new Client(cfg);
		CompletableFuture<Lock> granted = new CompletableFuture<>();
		Thread acquirer = new Thread(() -> {
			try {
				granted.complete(c.acquire("jvm/queue", Monolock.NoTimeout, null));
			} catch (Exception e) {
				granted.completeExceptionally(e);
			}
		}, "the-acquiring-thread");
		acquirer.setDaemon(true);
		acquirer.start();
		String heard = waiting.poll(BOUND_SECONDS, TimeUnit.SECONDS);
		// onWaiting runs on the thread that called acquire, as documented.
		Check.equal("jvm/queue on the-acquiring-thread", heard, "onWaiting");
		Check.isTrue(!granted.isDone(), "still waiting while held");
		holder.unlock();
		Lock next = granted.get(BOUND_SECONDS, TimeUnit.SECONDS);
		Check.isTrue(next.token() > holder.token(), "tokens grow: " + holder.token() + " then " + next.token());
		next.unlock();
	}

	@Test
	public void lostListenerRunsOnAJavaThreadWithCodeAndReason() throws Exception {
		Lock lock = client(10000).acquire("jvm/lost", Monolock.NoTimeout, null);
		Thread testThread = Thread.currentThread();
		CompletableFuture<String> heard = new CompletableFuture<>();
		lock.setLostListener((code, reason) -> {
			Thread t = Thread.currentThread();
			// Calling back into Go from the callback must work too.
			heard.complete(code + "|" + reason + "|" + (t != testThread) + "|" + t.isDaemon() + "|" + lock.isLost());
		});
		server().stop(); // graceful: ERROR 0x01 to every session
		String[] got = heard.get(BOUND_SECONDS, TimeUnit.SECONDS).split("\\|");
		Check.equal("1", got[0], "code");
		Check.isTrue(got[1].contains("server shutting down"), "reason: " + got[1]);
		Check.equal("true", got[2], "called on another thread than the test's");
		Check.equal("true", got[3], "Go threads are attached as daemon threads");
		Check.equal("true", got[4], "isLost() inside the callback");
		Check.equal(Monolock.KindServer, lock.lostKind(), "lostKind");
		Check.equal(1L, lock.lostCode(), "lostCode");
		Check.isTrue(!lock.isHeld(), "not held");
		lock.unlock(); // allowed after loss
		Check.isTrue(lock.isLost(), "still reported lost after unlock");
	}

	@Test
	public void aCrashedServerMeansLostWithoutCode() throws Exception {
		Lock lock = client(10000).acquire("jvm/crash", Monolock.NoTimeout, null);
		BlockingQueue<Long> codes = new ArrayBlockingQueue<>(4);
		lock.setLostListener((code, reason) -> codes.add(code));
		server().kill();
		Long code = codes.poll(BOUND_SECONDS, TimeUnit.SECONDS);
		Check.equal(Monolock.NoCode, code, "code of a lost connection");
		Check.equal(Monolock.KindIO, lock.lostKind(), "lostKind");
		lock.unlock();
	}

	@Test
	public void unlockIsIdempotentAndNotALoss() throws Exception {
		Client c = client(10000);
		Lock lock = c.acquire("jvm/unlock", Monolock.NoTimeout, null);
		BlockingQueue<Long> codes = new ArrayBlockingQueue<>(4);
		lock.setLostListener((code, reason) -> codes.add(code));
		lock.unlock();
		lock.unlock();
		Check.isTrue(!lock.isHeld() && !lock.isLost(), "neither held nor lost");
		Check.equal("", lock.lostKind(), "lostKind");
		// The lock is free again: unlock returned once the server let it go.
		Lock again = c.acquire("jvm/unlock", BOUND_SECONDS * 1000, null);
		again.unlock();
		Check.equal(null, codes.poll(100, TimeUnit.MILLISECONDS), "onLost after unlock");
	}

	/** spec/vectors/frames.json client_invalid: refused before sending, with the code. */
	@Test
	@SuppressWarnings("unchecked")
	public void specInvalidInputsThrowWithTheirCode() throws Exception {
		Path frames = Path.of(System.getProperty("monolock.spec", "../spec"), "vectors", "frames.json");
		Map<String, Object> spec = (Map<String, Object>) Json.parse(Files.readString(frames));
		List<Map<String, Object>> cases = (List<Map<String, Object>>) spec.get("client_invalid");
		int checked = 0;
		for (Map<String, Object> v : cases) {
			byte[] raw = HexFormat.of().parseHex((String) v.get("name_hex"));
			String name = new String(raw, StandardCharsets.UTF_8);
			if (!java.util.Arrays.equals(raw, name.getBytes(StandardCharsets.UTF_8))) {
				continue; // invalid UTF-8: a Java String cannot carry it (no invalid_utf8_names)
			}
			Config cfg = new Config();
			cfg.setServers("127.0.0.1:1"); // never reached: validation comes first
			cfg.setLeaseMillis((Long) v.get("lease_ms"));
			Exception e = Check.fails(() -> new Client(cfg).tryAcquire(name), (String) v.get("desc"));
			long want = (Long) v.get("code");
			Check.equal(Monolock.KindValidation, Monolock.errorKind(e), v.get("desc") + ": kind");
			Check.equal(want, Monolock.errorCode(e), v.get("desc") + ": code");
			Check.isTrue(e.getMessage().contains(String.format("code 0x%02x", want)), "message carries the code: " + e.getMessage());
			checked++;
		}
		Check.isTrue(checked >= 5, "checked the expressible vectors, got " + checked);
	}

	@Test
	public void timeoutAndCancelEndAWait() throws Exception {
		Client c = client(10000);
		Lock holder = c.acquire("jvm/wait", Monolock.NoTimeout, null);
		try {
			Exception timeout = Check.fails(() -> c.acquire("jvm/wait", 100, null), "acquire with 100 ms");
			Check.equal(Monolock.KindTimeout, Monolock.errorKind(timeout), "kind");

			Canceller cancel = new Canceller();
			CompletableFuture<Exception> ended = CompletableFuture.supplyAsync(() -> Check.fails(
					() -> c.acquire("jvm/wait", Monolock.NoTimeout, cancel), "cancelled acquire"));
			Thread.sleep(50); // let it queue; the outcome is the same if it has not yet
			cancel.cancel();
			Exception cancelled = ended.get(BOUND_SECONDS, TimeUnit.SECONDS);
			Check.equal(Monolock.KindCancelled, Monolock.errorKind(cancelled), "kind");
			Check.isTrue(cancel.isCancelled(), "isCancelled");
		} finally {
			holder.unlock();
		}
	}

	@Test
	public void unreachableServerIsAConnectError() throws Exception {
		Config cfg = new Config();
		cfg.setServers("127.0.0.1:1");
		cfg.setDialTimeoutMillis(2000);
		Exception e = Check.fails(() -> new Client(cfg).tryAcquire("jvm/nowhere"), "tryAcquire");
		Check.equal(Monolock.KindConnect, Monolock.errorKind(e), "kind");
	}

	@Test
	public void badConfigIsRefusedByTheConstructor() {
		Config cfg = new Config();
		cfg.setServers("");
		Exception e = Check.fails(() -> new Client(cfg), "new Client without servers");
		Check.equal(Monolock.KindConfig, Monolock.errorKind(e), "kind");
		cfg.setServers("127.0.0.1:1");
		cfg.setRootCAsPEM("not a certificate".getBytes(StandardCharsets.UTF_8));
		e = Check.fails(() -> Monolock.newClient(cfg), "newClient with bad root CAs");
		Check.equal(Monolock.KindConfig, Monolock.errorKind(e), "kind");
	}

	@Test
	public void exceptionsFromElsewhereHaveNoKind() {
		Exception e = new IllegalStateException("not monolock's");
		Check.equal("", Monolock.errorKind(e), "kind");
		Check.equal(Monolock.NoCode, Monolock.errorCode(e), "code");
	}

	@Test
	public void aLockMadeInJavaHoldsNothing() {
		Lock l = new Lock();
		Check.isTrue(!l.isHeld() && !l.isLost(), "neither held nor lost");
		Check.equal(0L, l.token(), "token");
		l.setLostListener((code, reason) -> {});
		l.unlock();
	}

	@Test
	public void manyLocksAndCollectedProxiesStayConsistent() throws Exception {
		Client c = client(10000);
		long last = 0;
		for (int i = 0; i < 20; i++) {
			Lock l = c.acquire("jvm/many/" + i, BOUND_SECONDS * 1000, null);
			l.setLostListener((code, reason) -> {});
			Check.isTrue(l.token() > last, "tokens grow");
			last = l.token();
			l.unlock();
			if (i % 5 == 0) {
				System.gc(); // lets Seq's reference tracking release Go objects
			}
		}
	}

	/** Election: a term with a value, seen by a follower's listener and by leader(). */
	@Test
	public void campaignObserveAndLeader() throws Exception {
		Client c = client(10000);
		Check.equal(Monolock.LeaderNone, c.leader("jvm/leader", BOUND_SECONDS * 1000).getState(), "no leader yet");
		BlockingQueue<monolock.Leader> seen = new ArrayBlockingQueue<>(16);
		monolock.Observer obs = c.observe("jvm/leader", BOUND_SECONDS * 1000, seen::add);
		try {
			Check.equal(Monolock.LeaderNone, seen.poll(BOUND_SECONDS, TimeUnit.SECONDS).getState(), "first change");
			Lock term = c.campaign("jvm/leader", "10.0.0.7:80", BOUND_SECONDS * 1000, null);
			monolock.Leader l = seen.poll(BOUND_SECONDS, TimeUnit.SECONDS);
			Check.equal(Monolock.LeaderLeading, l.getState(), "elected");
			Check.equal("10.0.0.7:80", l.getValue(), "value");
			Check.equal(term.tokenString(), l.getTokenString(), "token");
			term.proclaim("10.0.0.7:81");
			Check.equal("10.0.0.7:81", seen.poll(BOUND_SECONDS, TimeUnit.SECONDS).getValue(), "proclaimed");
			Check.equal("10.0.0.7:81", c.leader("jvm/leader", BOUND_SECONDS * 1000).getValue(), "leader()");
			term.resign();
			Check.equal(Monolock.LeaderNone, seen.poll(BOUND_SECONDS, TimeUnit.SECONDS).getState(), "resigned");
		} finally {
			obs.stop();
		}
	}
}
