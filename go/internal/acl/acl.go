// Package acl decides which client may take or watch which lock: a small
// text file maps client identities to the lock-name patterns they may
// acquire or watch.
//
// # File format
//
// One rule per line: an identity pattern, then one or more lock-name
// patterns, separated by spaces or tabs. '#' starts a comment; blank lines
// are ignored. Several lines for the same identity add up.
//
//	# identity                                patterns
//	cn:deployer                               deploy/*
//	uri:spiffe://example.org/ns/ci/sa/runner  ci/* build/*
//	uri:spiffe://example.org/ns/batch/*       batch/*
//	dns:*.workers.example.org                 jobs/*
//	anonymous                                 public/*
//	*                                         shared/*
//	cn:dashboard                              watch:deploy/* watch:ci/*
//
// An identity is "anonymous" or has a kind prefix (cn:, dns:, uri:), as
// produced by package peer from the verified client certificate; a client
// with several (a CN and SANs) is allowed what any of them is allowed. The
// identity "*" matches every client, anonymous ones included.
//
// A plain lock-name pattern allows taking the names it matches and
// watching them (protocol version 3): a holder may always see its own
// lock. A pattern prefixed with "watch:" allows only watching them, for
// clients that observe locks they must never take. The prefix is always
// read as one: to allow taking names that themselves start with "watch:",
// begin the pattern with '*' ("*watch:x", which matches a little more).
//
// In both columns '*' matches any run of characters, '/' included, and every
// other character matches itself; there is no escaping. A pattern cannot
// contain whitespace: match such names with '*'. Whatever no rule allows is
// denied, so an empty file denies everything.
package acl

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/configfile"
)

// maxLineLen bounds one line of the file: far above any sensible rule, it
// only keeps a wrong file (a binary, a log) from being read into one line.
const maxLineLen = 64 << 10

// maxPatternLen bounds a pattern: lock names are at most 255 bytes, and an
// identity pattern need not be longer than a long SPIFFE ID.
const maxPatternLen = 1024

// Rules is a parsed ACL. The zero value denies everything. Rules is
// immutable and safe for concurrent use.
type Rules struct {
	rules []rule
}

type rule struct {
	identity string        // pattern over identities
	names    []namePattern // patterns over lock names
}

// watchPrefix marks a lock-name pattern that allows watching only.
const watchPrefix = "watch:"

// namePattern is a lock-name pattern and the right it grants.
type namePattern struct {
	pattern   string // without the watch: prefix
	watchOnly bool
}

// Parse reads an ACL. An error names the line and what is wrong with it.
func Parse(r io.Reader) (*Rules, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineLen)
	rs := &Rules{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			continue
		}
		if err := checkIdentity(fields[0]); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(fields) == 1 {
			return nil, fmt.Errorf("line %d: identity %q has no lock-name patterns", n, fields[0])
		}
		names := make([]namePattern, 0, len(fields)-1)
		for _, p := range fields[1:] {
			np, err := parseNamePattern(p)
			if err != nil {
				return nil, fmt.Errorf("line %d: lock-name pattern %q: %w", n, p, err)
			}
			names = append(names, np)
		}
		rs.rules = append(rs.rules, rule{identity: fields[0], names: names})
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, fmt.Errorf("a line is longer than %d bytes: not an ACL file?", maxLineLen)
		}
		return nil, err
	}
	return rs, nil
}

// MaxFileSize bounds an ACL file: thousands of rules, far more than a
// server's identities need.
const MaxFileSize = 4 << 20

// ParseFile reads the ACL in the file at path, a regular file of at most
// MaxFileSize bytes.
func ParseFile(path string) (*Rules, error) {
	b, err := configfile.Read(path, MaxFileSize)
	if err != nil {
		return nil, err
	}
	rs, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

func checkIdentity(id string) error {
	if err := checkPattern(id); err != nil {
		return fmt.Errorf("identity %q: %w", id, err)
	}
	if id == "anonymous" || strings.HasPrefix(id, "*") {
		return nil
	}
	for _, kind := range []string{"cn:", "dns:", "uri:"} {
		if strings.HasPrefix(id, kind) {
			return nil
		}
	}
	return fmt.Errorf("identity %q: want anonymous, *, or a cn:, dns: or uri: prefix", id)
}

// parseNamePattern splits off a watch: prefix and checks what follows as
// any other pattern, so that the prefix never hides a pattern Parse would
// refuse plain.
func parseNamePattern(field string) (namePattern, error) {
	p, watchOnly := strings.CutPrefix(field, watchPrefix)
	if watchOnly && p == "" {
		// An empty pattern would match only the empty name, which is no
		// lock: surely a pattern forgotten after the prefix.
		return namePattern{}, fmt.Errorf("no pattern after %s", watchPrefix)
	}
	if err := checkPattern(p); err != nil {
		return namePattern{}, err
	}
	return namePattern{pattern: p, watchOnly: watchOnly}, nil
}

func checkPattern(p string) error {
	switch {
	case !utf8.ValidString(p):
		return fmt.Errorf("not valid UTF-8")
	case len(p) > maxPatternLen:
		return fmt.Errorf("longer than %d bytes", maxPatternLen)
	}
	return nil
}

// Len returns the number of rules (lines with a rule).
func (rs *Rules) Len() int { return len(rs.rules) }

// Allows reports whether a client with the given identities may acquire the
// lock name: some rule whose identity pattern matches one of them has a
// plain (not watch:) pattern matching name.
func (rs *Rules) Allows(identities []string, name string) bool {
	return rs.allows(identities, name, false)
}

// AllowsWatch reports whether a client with the given identities may watch
// the lock name: some rule whose identity pattern matches one of them has a
// pattern matching name, watch: or plain, since whoever may take a name may
// see it.
func (rs *Rules) AllowsWatch(identities []string, name string) bool {
	return rs.allows(identities, name, true)
}

// allows is Allows, or AllowsWatch when watch is set (and watch: patterns
// count too).
func (rs *Rules) allows(identities []string, name string, watch bool) bool {
	for _, r := range rs.rules {
		if !matchesAny(r.identity, identities) {
			continue
		}
		for _, p := range r.names {
			if (watch || !p.watchOnly) && Match(p.pattern, name) {
				return true
			}
		}
	}
	return false
}

func matchesAny(pattern string, ids []string) bool {
	for _, id := range ids {
		if Match(pattern, id) {
			return true
		}
	}
	return false
}

// Match reports whether s matches pattern, in which '*' stands for any run
// of bytes (possibly empty) and every other byte for itself. It runs in
// O(len(pattern)*len(s)) at worst and does not allocate.
func Match(pattern, s string) bool {
	// The classic wildcard walk: on a mismatch, let the last '*' swallow one
	// more byte and retry from there.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
