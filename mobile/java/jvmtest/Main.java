package jvmtest;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A tiny test runner, so the binding's tests need nothing but the JDK: runs
 * every @Test method of the test classes, each on its own thread with a time
 * bound, prints PASS/FAIL lines and exits 1 on any failure. Optional
 * arguments select tests by name substring.
 */
public final class Main {
	private static final Class<?>[] TEST_CLASSES = {BindingTests.class, DocsTests.class};
	private static final long TEST_BOUND_SECONDS = 60;

	public static void main(String[] args) throws Exception {
		List<String> failed = new ArrayList<>();
		int passed = 0;
		long start = System.nanoTime();
		for (Class<?> cls : TEST_CLASSES) {
			Method[] methods = cls.getMethods();
			Arrays.sort(methods, Comparator.comparing(Method::getName));
			for (Method m : methods) {
				if (!m.isAnnotationPresent(Test.class) || !selected(m.getName(), args)) {
					continue;
				}
				String name = cls.getSimpleName() + "." + m.getName();
				Throwable failure = run(cls, m);
				if (failure == null) {
					passed++;
					System.out.println("PASS " + name);
				} else {
					failed.add(name);
					System.out.println("FAIL " + name);
					failure.printStackTrace(System.out);
				}
			}
		}
		System.out.printf("%d passed, %d failed in %.1f s%n", passed, failed.size(), (System.nanoTime() - start) / 1e9);
		if (!failed.isEmpty()) {
			System.out.println("FAILED: " + String.join(", ", failed));
		}
		System.out.flush();
		// Exit explicitly: a test that went wrong may leave threads behind.
		System.exit(failed.isEmpty() && passed > 0 ? 0 : 1);
	}

	private static boolean selected(String name, String[] filters) {
		if (filters.length == 0) {
			return true;
		}
		return Arrays.stream(filters).anyMatch(name::contains);
	}

	/** Runs one test method on a fresh instance; returns its failure or null. */
	private static Throwable run(Class<?> cls, Method m) throws InterruptedException {
		Throwable[] result = new Throwable[1];
		Thread t = new Thread(() -> {
			try {
				Object instance = cls.getDeclaredConstructor().newInstance();
				try {
					m.invoke(instance);
				} finally {
					if (instance instanceof AutoCloseable c) {
						c.close();
					}
				}
			} catch (InvocationTargetException e) {
				result[0] = e.getCause();
			} catch (Throwable e) {
				result[0] = e;
			}
		}, "test-" + m.getName());
		t.setDaemon(true);
		t.start();
		t.join(TimeUnit.SECONDS.toMillis(TEST_BOUND_SECONDS));
		if (t.isAlive()) {
			AssertionError hung = new AssertionError("still running after " + TEST_BOUND_SECONDS + " s");
			hung.setStackTrace(t.getStackTrace());
			return hung;
		}
		return result[0];
	}
}
