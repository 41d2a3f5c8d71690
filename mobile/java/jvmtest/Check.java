package jvmtest;

import java.util.Objects;

/** Assertions for the tests: each throws AssertionError with what differed. */
public final class Check {
	private Check() {}

	public static void isTrue(boolean cond, String what) {
		if (!cond) {
			throw new AssertionError(what);
		}
	}

	public static void equal(Object want, Object got, String what) {
		if (!Objects.equals(want, got)) {
			throw new AssertionError(what + ": want <" + want + ">, got <" + got + ">");
		}
	}

	/** A block that is expected to throw. */
	public interface Throwing {
		void run() throws Exception;
	}

	/** Runs block and returns the exception it threw; fails if it returned normally. */
	public static Exception fails(Throwing block, String what) {
		try {
			block.run();
		} catch (Exception e) {
			return e;
		}
		throw new AssertionError(what + ": expected an exception, none was thrown");
	}
}
