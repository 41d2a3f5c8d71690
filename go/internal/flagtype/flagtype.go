// Package flagtype holds the flag types that the monolock commands share,
// so that a flag is spelled and parsed the same way in serve, run, locks
// and kick.
package flagtype

import (
	"flag"
	"fmt"
	"regexp"
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
