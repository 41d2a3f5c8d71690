// Package termtext keeps text that someone else chose (a lock name any
// client may take, a certificate's identity, a server's error reason) text
// when it is written to a terminal: control characters, invalid UTF-8 and
// other non-printable runes are escaped, so that they cannot recolour the
// screen, set its title, or forge a line of output.
package termtext

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Field returns s as one field of a table or a message: unchanged when it
// is plain (printable UTF-8 without a space, quote or backslash), else
// quoted with Go's escapes (strconv.Quote: "a\x1b[31m b"), as ls and git
// quote file names. The quote characters are quoted too, so that a name
// cannot pass for the quoted form of another.
func Field(s string) string {
	if plain(s) {
		return s
	}
	return strconv.Quote(s)
}

func plain(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) || r == ' ' || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}

// Line returns s with each control character, invalid UTF-8 byte and
// other non-printable rune escaped as Go does (\x1b, \r, \n, \u202e,
// \xff), and the rest as it is: for a line of messages that may carry
// someone else's text. The result is one line.
func Line(s string) string {
	if safe(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:]) // two hex digits
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func safe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
