package acl

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/claims"
)

const example = `
# identity                                patterns
cn:deployer                               deploy/*
uri:spiffe://example.org/ns/ci/sa/runner  ci/* build/*   # two patterns
uri:spiffe://example.org/ns/batch/*       batch/*
dns:*.workers.example.org                 jobs/*
anonymous                                 public/*
*                                         shared/*
cn:deployer                               release
`

func TestExampleRules(t *testing.T) {
	rs, err := Parse(strings.NewReader(example))
	require.NoError(t, err)
	assert.Equal(t, 7, rs.Len())
	cases := []struct {
		ids   []string
		name  string
		allow bool
	}{
		{[]string{"cn:deployer"}, "deploy/web", true},
		{[]string{"cn:deployer"}, "release", true},      // second line for the same identity adds up
		{[]string{"cn:deployer"}, "release/x", false},   // no '*': exact
		{[]string{"cn:deployer"}, "shared/cache", true}, // '*' identity covers everyone
		{[]string{"cn:deployer"}, "ci/x", false},
		{[]string{"cn:runner", "uri:spiffe://example.org/ns/ci/sa/runner"}, "build/1", true}, // any identity of the client
		{[]string{"uri:spiffe://example.org/ns/batch/sa/nightly"}, "batch/a/b", true},        // '*' spans '/'
		{[]string{"dns:w1.workers.example.org"}, "jobs/7", true},
		{[]string{"dns:workers.example.org"}, "jobs/7", false},
		{[]string{"anonymous"}, "public/x", true},
		{[]string{"anonymous"}, "deploy/web", false},
		{[]string{"cn:anonymous"}, "public/x", false}, // kinds never mix
		{[]string{"anonymous"}, "shared/", true},
	}
	for _, c := range cases {
		assert.Equal(t, c.allow, rs.Allows(c.ids, c.name), "%v on %q", c.ids, c.name)
	}
}

// A watch: pattern allows watching only; a plain pattern allows taking and
// watching; an identity's watch: and plain patterns add up.
func TestWatchRules(t *testing.T) {
	rs, err := Parse(strings.NewReader(`
cn:dashboard  watch:deploy/* watch:ci/*
cn:dashboard  ci/dashboard
anonymous     watch:*
cn:deployer   deploy/*
`))
	require.NoError(t, err)
	cases := []struct {
		ids         []string
		name        string
		take, watch bool
	}{
		{[]string{"cn:dashboard"}, "deploy/web", false, true},
		{[]string{"cn:dashboard"}, "ci/x", false, true},
		{[]string{"cn:dashboard"}, "ci/dashboard", true, true}, // the plain line adds taking
		{[]string{"cn:dashboard"}, "batch/x", false, false},
		{[]string{"cn:deployer"}, "deploy/web", true, true}, // taking implies watching
		{[]string{"cn:deployer"}, "ci/x", false, false},
		{[]string{"anonymous"}, "anything", false, true},
		{[]string{"cn:dashboard"}, "watch:deploy/web", false, false}, // the prefix is no part of the name
	}
	for _, c := range cases {
		assert.Equal(t, c.take, rs.Allows(c.ids, c.name), "take: %v on %q", c.ids, c.name)
		assert.Equal(t, c.watch, rs.AllowsWatch(c.ids, c.name), "watch: %v on %q", c.ids, c.name)
	}
}

// The example file has no watch: patterns: everything it lets a client
// take, it lets it watch, and nothing more.
func TestExampleRulesWatchAsTheyTake(t *testing.T) {
	rs, err := Parse(strings.NewReader(example))
	require.NoError(t, err)
	for _, id := range []string{"cn:deployer", "anonymous", "dns:w1.workers.example.org", "cn:nobody"} {
		for _, name := range []string{"deploy/web", "release", "public/x", "jobs/7", "shared/", "ci/x"} {
			ids := []string{id}
			assert.Equal(t, rs.Allows(ids, name), rs.AllowsWatch(ids, name), "%s on %q", id, name)
		}
	}
}

func TestEmptyFileDeniesEverything(t *testing.T) {
	rs, err := Parse(strings.NewReader("# nothing\n\n"))
	require.NoError(t, err)
	assert.False(t, rs.Allows([]string{"anonymous"}, "x"))
	assert.False(t, (&Rules{}).Allows([]string{"cn:a"}, "x"))
	assert.False(t, rs.AllowsWatch([]string{"anonymous"}, "x"))
	assert.False(t, (&Rules{}).AllowsWatch([]string{"cn:a"}, "x"))
}

func TestParseErrorsNameTheLine(t *testing.T) {
	cases := map[string]string{
		"cn:a x\nbogus y\n":       `line 2: identity "bogus": want anonymous, *, or a cn:, dns: or uri: prefix`,
		"cn:a\n":                  `line 1: identity "cn:a" has no lock-name patterns`,
		"cn:a x\n\n  anonymous\n": `line 3: identity "anonymous" has no lock-name patterns`,
		"cn:a \xff\n":             `line 1: lock-name pattern "\xff": not valid UTF-8`,
		"CN:a x\n":                `line 1: identity "CN:a": want anonymous, *, or a cn:, dns: or uri: prefix`,
		"cn:a x watch:\n":         `line 1: lock-name pattern "watch:": no pattern after watch:`,
		"cn:a x\ncn:b watch:\n":   `line 2: lock-name pattern "watch:": no pattern after watch:`,
		"cn:a watch:\xff\n":       `line 1: lock-name pattern "watch:\xff": not valid UTF-8`,
	}
	for in, want := range cases {
		_, err := Parse(strings.NewReader(in))
		require.Error(t, err, in)
		assert.Equal(t, want, err.Error(), in)
		assert.NotContains(t, err.Error(), "\n", "one line")
	}
	_, err := Parse(strings.NewReader("cn:a " + strings.Repeat("x", maxLineLen+1)))
	assert.ErrorContains(t, err, "longer than")

	// The limit on a pattern's length counts what follows the prefix, as
	// for a plain pattern.
	long := strings.Repeat("x", maxPatternLen)
	_, err = Parse(strings.NewReader("cn:a watch:" + long + "\n"))
	assert.NoError(t, err)
	_, err = Parse(strings.NewReader("cn:a watch:" + long + "x\n"))
	assert.ErrorContains(t, err, fmt.Sprintf("line 1: lock-name pattern \"watch:%sx\": longer than %d bytes", long, maxPatternLen))
}

func TestParseFileAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl")
	require.NoError(t, os.WriteFile(path, []byte("anonymous a\n"), 0o600))
	a, err := Load(path)
	require.NoError(t, err)
	assert.True(t, a.Rules().Allows([]string{"anonymous"}, "a"))

	require.NoError(t, os.WriteFile(path, []byte("anonymous b\n"), 0o600))
	_, err = a.Reload()
	require.NoError(t, err)
	assert.False(t, a.Rules().Allows([]string{"anonymous"}, "a"))
	assert.True(t, a.Rules().Allows([]string{"anonymous"}, "b"))

	// A bad file is rejected and the rules in force stay.
	require.NoError(t, os.WriteFile(path, []byte("oops\n"), 0o600))
	_, err = a.Reload()
	require.ErrorContains(t, err, path+": line 1:")
	assert.True(t, a.Rules().Allows([]string{"anonymous"}, "b"))

	_, err = Load(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
}

// The claim layer asks an Authorizer about watches only through
// claims.Watcher: a method that drifted from it would silently fall back
// to the rights to take.
var _ claims.Watcher = (*Authorizer)(nil)

// AuthorizeWatch allows by watch: and plain patterns alike and refuses in
// Authorize's words, saying watching.
func TestAuthorizeWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl")
	require.NoError(t, os.WriteFile(path, []byte("anonymous watch:obs/* take/*\n"), 0o600))
	a, err := Load(path)
	require.NoError(t, err)
	conn, other := net.Pipe() // not TLS: anonymous
	defer conn.Close()
	defer other.Close()

	assert.NoError(t, a.AuthorizeWatch(conn, "obs/x"))
	assert.NoError(t, a.AuthorizeWatch(conn, "take/x"))
	assert.NoError(t, a.Authorize(conn, "take/x"))
	assert.EqualError(t, a.Authorize(conn, "obs/x"), "no ACL rule lets anonymous take it")
	assert.EqualError(t, a.AuthorizeWatch(conn, "other/x"), "no ACL rule lets anonymous watch it")
}

// reference is Match written the obvious way: translate to a regexp.
func reference(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`).MatchString(s)
}

// Property: Match agrees with the regexp reference on random patterns and
// subjects over a small alphabet (so that matches are frequent), and every
// subject matches the pattern made of itself and the pattern made of itself
// with any bytes replaced by '*'.
func TestMatchProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab/*"
	gen := func(n int, alpha string) string {
		b := make([]byte, r.IntN(n+1))
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
		return string(b)
	}
	for range 20000 {
		p, s := gen(8, alphabet), gen(10, "ab/")
		require.Equal(t, reference(p, s), Match(p, s), "Match(%q, %q)", p, s)

		self := []byte(s)
		for i := range self {
			if r.IntN(3) == 0 {
				self[i] = '*'
			}
		}
		require.True(t, Match(s, s), "%q matches itself", s)
		require.True(t, Match(string(self), s), "%q should match %q", self, s)
		require.True(t, Match("*", s))
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	s := strings.Repeat("ab", 100)
	allocs := testing.AllocsPerRun(100, func() { Match("a*b*c*d", s) })
	assert.Zero(t, allocs)
}

// FuzzMatch checks Match against the regexp reference on any input.
func FuzzMatch(f *testing.F) {
	f.Add("ci/*", "ci/build")
	f.Add("*a*a*a*", "aaaa")
	f.Add("", "")
	f.Add("a**b", "ab")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 256 {
			return // the reference regexp gets slow; Match itself is bounded
		}
		if !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return // lock names and parsed patterns are UTF-8; regexp needs it
		}
		if got, want := Match(pattern, s), reference(pattern, s); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", pattern, s, got, want)
		}
	})
}

// FuzzParse: any input either parses or fails with a one-line error naming
// a line; a parsed file allows each of its rules' literal lock names to the
// literal identities: to watch always, to take when the pattern is plain.
// Whatever may be taken may be watched.
func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add("cn:a x\nbogus\n")
	f.Add("# only a comment")
	f.Add("\xff\xfe")
	f.Add("cn:a watch:x watch:\n")
	f.Fuzz(func(t *testing.T, in string) {
		rs, err := Parse(strings.NewReader(in))
		if err != nil {
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Fatalf("multi-line error %q", msg)
			}
			if !strings.HasPrefix(msg, "line ") && !strings.Contains(msg, "longer than") {
				t.Fatalf("error without a line number: %q", msg)
			}
			return
		}
		for _, r := range rs.rules {
			if !utf8.ValidString(r.identity) || len(r.names) == 0 {
				t.Fatalf("bad rule accepted: %+v", r)
			}
			for _, n := range r.names {
				ids := []string{r.identity}
				if !rs.AllowsWatch(ids, n.pattern) {
					t.Fatalf("rule %+v does not allow watching its own pattern %q", r, n.pattern)
				}
				if !n.watchOnly && !rs.Allows(ids, n.pattern) {
					t.Fatalf("rule %+v does not allow taking its own pattern %q", r, n.pattern)
				}
				if rs.Allows(ids, n.pattern) && !rs.AllowsWatch(ids, n.pattern) {
					t.Fatalf("%q may be taken but not watched", n.pattern)
				}
			}
		}
	})
}
