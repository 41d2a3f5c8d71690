package runcmd

import (
	"flag"
	"strings"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/flaghelp"
	"github.com/monolock/monolock/go/internal/flagtype"
)

// shortFlags are the one-letter spellings of flags, as flock has them.
var shortFlags = map[string]string{"n": "no-wait", "w": "timeout", "E": "conflict-exit-code", "c": "command",
	"s": "shared", "x": "exclusive", "e": "exclusive"}

// flockArgs rewrites flock(1)'s short option habits, which the flag
// package does not parse, into its spellings: the cluster "-nw 1" becomes
// "-n -w 1", and an attached value "-w1" becomes "-w=1". Only the flags
// are read, up to the first argument that is not one, as by fset.Parse;
// an argument the flag package knows (-v, -lease, --timeout=5) and the
// value after it stay as they are, and one that is no cluster of known
// one-letter flags is left for fset.Parse to refuse.
func flockArgs(fset *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args)+2)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		name, _, attached := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fset.Lookup(name)
		if f == nil && a[1] != '-' {
			if split, ok := splitCluster(fset, a); ok {
				out = append(out, split[:len(split)-1]...)
				a = split[len(split)-1]
				name, _, attached = strings.Cut(a[1:], "=")
				f = fset.Lookup(name)
			}
		}
		out = append(out, a)
		if f != nil && !attached && !isBool(f) && i+1 < len(args) {
			i++ // the flag's value, whatever it looks like
			out = append(out, args[i])
		}
	}
	return out
}

// splitCluster splits "-nvw1" into "-n", "-v", "-w=1": one-letter flags,
// the last of which may take the rest as its value. ok is false if a
// letter is not a flag.
func splitCluster(fset *flag.FlagSet, a string) (split []string, ok bool) {
	for i, r := range a[1:] {
		f := fset.Lookup(string(r))
		if f == nil {
			return nil, false
		}
		if isBool(f) {
			split = append(split, "-"+string(r))
			continue
		}
		if rest := a[1+i+utf8.RuneLen(r):]; rest != "" {
			return append(split, "-"+string(r)+"="+rest), true
		}
		return append(split, "-"+string(r)), true
	}
	return split, true
}

// isBool reports whether f is a flag without a value, as -n.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// defineShort defines the short spellings of fset's flags (after them).
func defineShort(fset *flag.FlagSet) {
	for short, long := range shortFlags {
		f := fset.Lookup(long)
		fset.Var(f.Value, short, f.Usage)
	}
}

// flagHelp lists the flags as every monolock command does; a short
// spelling shares its long flag's entry, a duration flag takes D.
func flagHelp(fset *flag.FlagSet) string {
	return flaghelp.Text(fset, flaghelp.Options{
		Short: shortFlags,
		Arg: func(f *flag.Flag, arg string) string {
			if _, isDuration := f.Value.(flagtype.Duration); isDuration && arg == "value" {
				return "D"
			}
			return ""
		},
		HideDefault: func(f *flag.Flag) bool { return f.Name == "server" },
	})
}
