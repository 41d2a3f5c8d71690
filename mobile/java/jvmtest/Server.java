package jvmtest;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/** The real monolock server ($MONOLOCK_BIN) on a loopback port, for one test. */
public final class Server implements AutoCloseable {
	// The server writes its ready file with Go's encoding/json: a string
	// field is "name":"value" (docs/operating.md, "The ready file").
	private static final Pattern LOCK_ADDR = Pattern.compile("\"lock_addr\":\"([^\"]*)\"");
	private static final long READY_TIMEOUT_MS = 20_000;
	private static final int TAIL_CHARS = 16 << 10;

	private final Process process;
	private final Path dataDir; // the test's directory: the data directory and the ready file
	private final StringBuilder stderr = new StringBuilder(); // its tail, for failure messages
	public final String addr;

	public Server() throws Exception {
		String bin = System.getenv("MONOLOCK_BIN");
		if (bin == null || bin.isEmpty()) {
			throw new IllegalStateException("MONOLOCK_BIN is not set (mobile/scripts/jvm.sh sets it)");
		}
		dataDir = Files.createTempDirectory("monolock-jvmtest");
		Path ready = dataDir.resolve("ready.json");
		ProcessBuilder pb = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:0",
				"--data-dir", dataDir.resolve("data").toString(), "--ready-file", ready.toString())
				.redirectOutput(ProcessBuilder.Redirect.DISCARD);
		pb.environment().remove("LD_PRELOAD"); // libjsig is for this JVM, not for the server
		process = pb.start();
		// Reads stderr to the end, so the server never blocks on a full pipe.
		Thread reader = new Thread(() -> {
			try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
				String line;
				while ((line = r.readLine()) != null) {
					synchronized (stderr) {
						stderr.append(line).append('\n');
						if (stderr.length() > 2 * TAIL_CHARS) {
							stderr.delete(0, stderr.length() - TAIL_CHARS);
						}
					}
				}
			} catch (IOException ignored) {
				// the process ended
			}
		}, "server-stderr");
		reader.setDaemon(true);
		reader.start();
		addr = waitReady(ready);
	}

	/** Polls for the ready file, which the server renames into place whole. */
	private String waitReady(Path ready) throws Exception {
		long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(READY_TIMEOUT_MS);
		while (true) {
			if (Files.exists(ready)) {
				String json = Files.readString(ready, StandardCharsets.UTF_8);
				Matcher m = LOCK_ADDR.matcher(json);
				if (!m.find()) {
					throw new IllegalStateException("no lock_addr in the ready file: " + json);
				}
				return m.group(1);
			}
			String why = null;
			if (!process.isAlive()) {
				why = "exited with status " + process.exitValue() + " before it was ready";
			} else if (System.nanoTime() > deadline) {
				why = "was not ready within " + READY_TIMEOUT_MS + " ms";
			}
			if (why != null) {
				close(); // kills it and removes its files
				synchronized (stderr) {
					throw new IllegalStateException("monolock serve " + why + "; its stderr:\n" + stderr);
				}
			}
			Thread.sleep(20);
		}
	}

	/** Graceful stop (SIGTERM): every session gets ERROR 0x01. */
	public void stop() throws InterruptedException {
		process.destroy();
		if (!process.waitFor(20, TimeUnit.SECONDS)) {
			process.destroyForcibly().waitFor();
		}
	}

	/** Crash (SIGKILL): connections just end. */
	public void kill() throws InterruptedException {
		process.destroyForcibly().waitFor();
	}

	@Override
	public void close() throws IOException {
		try {
			kill();
		} catch (InterruptedException e) {
			Thread.currentThread().interrupt();
		}
		try (Stream<Path> files = Files.walk(dataDir)) {
			files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
		}
	}
}
