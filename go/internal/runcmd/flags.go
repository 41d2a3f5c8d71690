package runcmd

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Duration is a duration flag that also takes a bare number as seconds, as
// flock's -w does: "5", "0.5", "1m30s" and "250ms" all work.
type Duration struct{ D *time.Duration }

// DurationVar defines a Duration flag on fs.
func DurationVar(fs *flag.FlagSet, d *time.Duration, name string, value time.Duration, usage string) {
	*d = value
	fs.Var(Duration{d}, name, usage)
}

// bareNumber is a decimal number without a unit.
var bareNumber = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$`)

func (v Duration) Set(s string) error {
	text := s
	if bareNumber.MatchString(s) {
		text += "s" // parsed as a decimal, so 0.0015 is exactly 1.5ms
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return fmt.Errorf("%q is not a duration (a number of seconds, or a number with a unit: 1.5s, 250ms, 2m)", s)
	}
	*v.D = d
	return nil
}

func (v Duration) String() string {
	if v.D == nil {
		return ""
	}
	return v.D.String()
}

// shortFlags are the one-letter spellings of flags, as flock has them.
var shortFlags = map[string]string{"n": "no-wait", "w": "timeout", "E": "conflict-exit-code"}

// defineShort defines the short spellings of fset's flags (after them).
func defineShort(fset *flag.FlagSet) {
	for short, long := range shortFlags {
		f := fset.Lookup(long)
		fset.Var(f.Value, short, f.Usage)
	}
}

// flagHelp lists the flags GNU style, with their defaults; a short
// spelling shares its long flag's entry.
func flagHelp(fset *flag.FlagSet) string {
	shortOf := map[string]string{}
	for short, long := range shortFlags {
		shortOf[long] = short
	}
	var b strings.Builder
	fset.VisitAll(func(f *flag.Flag) {
		if _, isShort := shortFlags[f.Name]; isShort {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		if _, isDuration := f.Value.(Duration); isDuration && arg == "value" {
			arg = "D"
		}
		b.WriteString("  ")
		if s, ok := shortOf[f.Name]; ok {
			fmt.Fprintf(&b, "-%s", s)
			if arg != "" {
				fmt.Fprintf(&b, " %s", arg)
			}
			b.WriteString(", ")
		}
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		fmt.Fprintf(&b, "%s%s", dash, f.Name)
		if arg != "" {
			fmt.Fprintf(&b, " %s", arg)
		}
		fmt.Fprintf(&b, "\n        %s", usage)
		if f.DefValue != "" && f.DefValue != "0s" && f.DefValue != "false" && f.Name != "server" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	return b.String()
}
