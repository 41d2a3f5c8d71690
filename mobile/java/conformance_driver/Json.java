package conformance_driver;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Just enough JSON for the conformance pipe protocol and the spec files:
 * parse returns Map, List, String, Long (integers that fit), Double, Boolean
 * or null; quote writes a string literal.
 */
public final class Json {
	private final String s;
	private int i;

	private Json(String s) {
		this.s = s;
	}

	/** Parses one JSON value; trailing text other than whitespace is an error. */
	public static Object parse(String text) {
		Json p = new Json(text);
		Object v = p.value();
		p.space();
		if (p.i != p.s.length()) {
			throw p.error("trailing text");
		}
		return v;
	}

	/** Returns s as a JSON string literal. */
	public static String quote(String s) {
		StringBuilder b = new StringBuilder(s.length() + 2).append('"');
		for (int k = 0; k < s.length(); k++) {
			char c = s.charAt(k);
			switch (c) {
				case '"' -> b.append("\\\"");
				case '\\' -> b.append("\\\\");
				case '\n' -> b.append("\\n");
				case '\r' -> b.append("\\r");
				case '\t' -> b.append("\\t");
				default -> {
					if (c < 0x20) {
						b.append(String.format("\\u%04x", (int) c));
					} else {
						b.append(c);
					}
				}
			}
		}
		return b.append('"').toString();
	}

	private IllegalArgumentException error(String what) {
		return new IllegalArgumentException("json: " + what + " at offset " + i);
	}

	private void space() {
		while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) {
			i++;
		}
	}

	private Object value() {
		space();
		if (i >= s.length()) {
			throw error("unexpected end");
		}
		char c = s.charAt(i);
		switch (c) {
			case '{':
				return object();
			case '[':
				return array();
			case '"':
				return string();
			case 't':
				return literal("true", Boolean.TRUE);
			case 'f':
				return literal("false", Boolean.FALSE);
			case 'n':
				return literal("null", null);
			default:
				if (c == '-' || (c >= '0' && c <= '9')) {
					return number();
				}
				throw error("unexpected '" + c + "'");
		}
	}

	private Object literal(String word, Object v) {
		if (!s.startsWith(word, i)) {
			throw error("bad literal");
		}
		i += word.length();
		return v;
	}

	private Map<String, Object> object() {
		Map<String, Object> m = new LinkedHashMap<>();
		i++; // {
		space();
		if (peek('}')) {
			return m;
		}
		while (true) {
			space();
			if (i >= s.length() || s.charAt(i) != '"') {
				throw error("expected a key");
			}
			String k = string();
			space();
			expect(':');
			m.put(k, value());
			space();
			if (peek('}')) {
				return m;
			}
			expect(',');
		}
	}

	private List<Object> array() {
		List<Object> l = new ArrayList<>();
		i++; // [
		space();
		if (peek(']')) {
			return l;
		}
		while (true) {
			l.add(value());
			space();
			if (peek(']')) {
				return l;
			}
			expect(',');
		}
	}

	private boolean peek(char c) {
		if (i < s.length() && s.charAt(i) == c) {
			i++;
			return true;
		}
		return false;
	}

	private void expect(char c) {
		if (!peek(c)) {
			throw error("expected '" + c + "'");
		}
	}

	private String string() {
		StringBuilder b = new StringBuilder();
		i++; // "
		while (true) {
			if (i >= s.length()) {
				throw error("unterminated string");
			}
			char c = s.charAt(i++);
			if (c == '"') {
				return b.toString();
			}
			if (c != '\\') {
				b.append(c);
				continue;
			}
			if (i >= s.length()) {
				throw error("unterminated escape");
			}
			char e = s.charAt(i++);
			switch (e) {
				case '"', '\\', '/' -> b.append(e);
				case 'b' -> b.append('\b');
				case 'f' -> b.append('\f');
				case 'n' -> b.append('\n');
				case 'r' -> b.append('\r');
				case 't' -> b.append('\t');
				case 'u' -> {
					if (i + 4 > s.length()) {
						throw error("short \\u escape");
					}
					b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
					i += 4;
				}
				default -> throw error("bad escape");
			}
		}
	}

	private Object number() {
		int start = i;
		while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
			i++;
		}
		String n = s.substring(start, i);
		if (n.matches("-?\\d+")) {
			try {
				return Long.parseLong(n);
			} catch (NumberFormatException tooBig) {
				// falls through: a double keeps its magnitude
			}
		}
		try {
			return Double.parseDouble(n);
		} catch (NumberFormatException e) {
			throw error("bad number " + n);
		}
	}
}
