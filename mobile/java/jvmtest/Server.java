package jvmtest;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/** The real monolock server ($MONOLOCK_BIN) on a loopback port, for one test. */
public final class Server implements AutoCloseable {
	private static final Pattern ADDR = Pattern.compile("msg=listening addr=(\\S+)");

	private final Process process;
	private final Path dataDir;
	public final String addr;

	public Server() throws Exception {
		String bin = System.getenv("MONOLOCK_BIN");
		if (bin == null || bin.isEmpty()) {
			throw new IllegalStateException("MONOLOCK_BIN is not set (mobile/scripts/jvm.sh sets it)");
		}
		dataDir = Files.createTempDirectory("monolock-jvmtest");
		ProcessBuilder pb = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir.toString())
				.redirectOutput(ProcessBuilder.Redirect.DISCARD);
		pb.environment().remove("LD_PRELOAD"); // libjsig is for this JVM, not for the server
		process = pb.start();
		CompletableFuture<String> found = new CompletableFuture<>();
		// Reads stderr to the end, so the server never blocks on a full pipe.
		Thread reader = new Thread(() -> {
			try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
				String line;
				while ((line = r.readLine()) != null) {
					Matcher m = ADDR.matcher(line);
					if (m.find()) {
						found.complete(m.group(1));
					}
				}
			} catch (IOException ignored) {
				// the process ended
			}
			found.completeExceptionally(new IllegalStateException("server exited without a listening line"));
		}, "server-stderr");
		reader.setDaemon(true);
		reader.start();
		addr = found.get(20, TimeUnit.SECONDS);
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
