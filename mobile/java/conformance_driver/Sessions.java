package conformance_driver;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import monolock.Client;
import monolock.Config;
import monolock.Session;

/** The session commands of the driver (capability sessions). */
final class Sessions {
	private Sessions() {}

	/** A claim put on a session, as far as its waiting event goes. */
	static final class Claim {
		final String id;
		final String name;
		final boolean waits;
		boolean told; // its waiting event is out (guarded by the entry)

		Claim(String id, String name, boolean waits) {
			this.id = id;
			this.name = name;
			this.waits = waits;
		}
	}

	/** One session command: its session once open, and its claims still waiting. */
	static final class Entry {
		final String id;
		private final CompletableFuture<Session> opened = new CompletableFuture<>();
		private final List<Claim> pending = new ArrayList<>();
		private volatile boolean closed;

		Entry(String id) {
			this.id = id;
		}

		/** Opens the session (on its own thread): opened, or error as a failed try-acquire. */
		void open(Config cfg, long timeoutMillis) {
			Session s;
			try {
				s = new Client(cfg).openSession(timeoutMillis);
			} catch (Exception e) {
				opened.completeExceptionally(e);
				synchronized (this) {
					if (!closed) {
						Driver.emit(Driver.failure("error", id, e));
					}
				}
				return;
			}
			synchronized (this) {
				opened.complete(s);
				if (closed) {
					s.close();
				} else {
					Driver.emit(Driver.event("opened", id));
				}
			}
		}

		/** The open session; the opening's exception when it failed. */
		Session await() throws Exception {
			try {
				return opened.get();
			} catch (ExecutionException e) {
				if (e.getCause() instanceof Exception cause) {
					throw cause;
				}
				throw e;
			}
		}

		synchronized Claim add(String claimId, String name, boolean waits) {
			Claim c = new Claim(claimId, name, waits);
			if (waits) {
				pending.add(c);
			}
			return c;
		}

		/** The claim's acquire returned: no waiting event for it after this. */
		synchronized void returned(Claim c) {
			pending.remove(c);
		}

		/**
		 * The session client's waiting listener. The binding names the lock,
		 * not the claim: it goes to the first waiting claim of that name not
		 * told yet (a session never re-queues, so once per claim).
		 */
		synchronized void waiting(String name) {
			for (Claim c : pending) {
				if (c.name.equals(name) && !c.told) {
					c.told = true;
					Driver.emit(Driver.event("waiting", c.id));
					return;
				}
			}
		}

		boolean isClosed() {
			return closed;
		}

		/**
		 * Closes the session: its locks are released without a loss, its
		 * pending acquires end silently. Waits for an opening in progress.
		 */
		void close() {
			synchronized (this) {
				closed = true;
			}
			try {
				await().close();
			} catch (Exception e) {
				// never opened: nothing to close
			}
		}
	}

	/** Closes every session at once: each close may wait up to a second for its server. */
	static void closeAll(Collection<Entry> entries) throws InterruptedException {
		List<Thread> threads = new ArrayList<>();
		for (Entry e : entries) {
			Thread t = new Thread(e::close, "close-" + e.id);
			t.setDaemon(true);
			t.start();
			threads.add(t);
		}
		for (Thread t : threads) {
			t.join(2500);
		}
	}
}
