package jvmtest;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Keeps docs/mobile.md honest: the names its Kotlin and Swift snippets use
 * must exist in the Java sources and the Objective-C header that gobind
 * generated from go/mobile. A renamed Go method fails here, not in an app.
 */
public final class DocsTests {
	/** Calls in the snippets that are not the binding's (Kotlin, Android, coroutines, Swift, Dispatch). */
	private static final Set<String> FOREIGN_CALLS = Set.of(
			"apply", "post", "i", "e", "w", "invokeOnCancellation", "resume", "resumeWithException",
			"global", "localizedDescription");

	private static String property(String key) {
		String v = System.getProperty(key);
		if (v == null) {
			throw new IllegalStateException("-D" + key + " is not set (mobile/scripts/jvm.sh sets it)");
		}
		return v;
	}

	/** The bodies of the fenced code blocks of the given language. */
	private static List<String> blocks(String markdown, String lang) {
		List<String> out = new ArrayList<>();
		Matcher m = Pattern.compile("(?ms)^```" + lang + "\\n(.*?)^```").matcher(markdown);
		while (m.find()) {
			out.add(m.group(1));
		}
		if (out.isEmpty()) {
			throw new AssertionError("docs/mobile.md has no ```" + lang + " block");
		}
		return out;
	}

	private static Set<String> matches(String text, String regex) {
		Set<String> out = new HashSet<>();
		Matcher m = Pattern.compile(regex, Pattern.MULTILINE).matcher(text);
		while (m.find()) {
			out.add(m.group(1));
		}
		return out;
	}

	private static void mustAll(Set<String> names, Set<String> known, String what) {
		List<String> missing = names.stream().filter(n -> !known.contains(n)).sorted().toList();
		Check.isTrue(missing.isEmpty(), "docs/mobile.md uses " + what + " that the binding lacks: " + missing);
	}

	@Test
	public void kotlinSnippetsUseGeneratedJavaNames() throws IOException {
		String kotlin = String.join("\n", blocks(Files.readString(Path.of(property("monolock.docs"))), "kotlin"));
		Path javaDir = Path.of(property("monolock.java"));
		Set<String> classes = new HashSet<>();
		StringBuilder all = new StringBuilder();
		try (Stream<Path> files = Files.list(javaDir)) {
			for (Path f : files.toList()) {
				classes.add(f.getFileName().toString().replace(".java", ""));
				all.append(Files.readString(f)).append('\n');
			}
		}
		String java = all.toString();
		Set<String> methods = matches(java, "(\\w+)\\([^)]*\\)\\s*(?:throws \\w+)?\\s*[;{]");
		Set<String> monolockMembers = matches(Files.readString(javaDir.resolve("Monolock.java")),
				"public static (?:final |native )?[\\w.]+ (\\w+)");
		Set<String> configSetters = new HashSet<>();
		for (String s : matches(Files.readString(javaDir.resolve("Config.java")), "native void set(\\w+)\\(")) {
			configSetters.add(Character.toLowerCase(s.charAt(0)) + s.substring(1));
		}

		mustAll(matches(kotlin, "^import monolock\\.(\\w+)$"), classes, "imports");
		mustAll(matches(kotlin, "\\bMonolock\\.(\\w+)"), monolockMembers, "Monolock members");
		Set<String> calls = matches(kotlin, "\\.(\\w+)\\s*[({]");
		calls.removeAll(FOREIGN_CALLS);
		calls.removeIf(c -> c.equals("concurrent") || c.equals("coroutines")); // package names in imports
		calls.removeAll(matches(kotlin, "fun (?:\\w+\\.)?(\\w+)\\(")); // defined by the snippet itself
		mustAll(calls, methods, "methods");
		// Properties set in Config().apply { ... }: Kotlin's view of the setters.
		Matcher apply = Pattern.compile("(?s)Config\\(\\)\\.apply \\{(.*?)\\n\\}").matcher(kotlin);
		Check.isTrue(apply.find(), "a Config().apply { } block");
		mustAll(matches(apply.group(1), "^\\s*(\\w+) = "), configSetters, "Config properties");
	}

	@Test
	public void swiftSnippetsUseGeneratedObjcNames() throws IOException {
		String swift = String.join("\n", blocks(Files.readString(Path.of(property("monolock.docs"))), "swift"));
		String header = Files.readString(Path.of(property("monolock.objc")));
		Set<String> words = matches(header, "\\b(\\w+)\\b");

		Set<String> types = new HashSet<>();
		for (String t : matches(swift, "\\b(Monolock\\w+)")) {
			// Swift imports a protocol that shares its name with a class as NameProtocol.
			types.add(t.endsWith("Protocol") ? t.substring(0, t.length() - "Protocol".length()) : t);
		}
		mustAll(types, words, "Objective-C names");

		Set<String> selectors = matches(header, "[)\\s](\\w+)(?::|;)");
		Set<String> calls = matches(swift, "\\??\\.(\\w+)\\(");
		calls.addAll(matches(swift, "func (\\w+)\\("));
		calls.removeAll(FOREIGN_CALLS);
		mustAll(calls, selectors, "methods");
		mustAll(matches(swift, "\\bcfg\\.(\\w+) = "), matches(header, "@property \\(nonatomic\\) [^;]*?(\\w+);"),
				"Config properties");

		// Argument labels: acquire("x", timeoutMillis: 1, cancel: nil) needs a selector
		// acquire:timeoutMillis:cancel:..., and onLost(_ code:, reason:) onLost:reason:.
		Matcher call = Pattern.compile("(?:\\.|func )(\\w+)\\(([^()]*)\\)").matcher(swift);
		while (call.find()) {
			List<String> labels = new ArrayList<>();
			Matcher l = Pattern.compile("(?:^|,)\\s*(\\w+):").matcher(call.group(2));
			while (l.find()) {
				if (!l.group(1).equals("_")) {
					labels.add(l.group(1));
				}
			}
			if (labels.isEmpty() || FOREIGN_CALLS.contains(call.group(1))) {
				continue;
			}
			StringBuilder selector = new StringBuilder("\\b" + call.group(1) + ":\\([^)]*\\)\\s*\\w+");
			for (String label : labels) {
				selector.append(" ").append(label).append(":\\([^)]*\\)\\s*\\w+");
			}
			Check.isTrue(Pattern.compile(selector.toString()).matcher(header).find(),
					"docs/mobile.md calls " + call.group(1) + " with labels " + labels + ", which no selector has");
		}
	}
}
