// Package flaghelp lists a command's flags for its -h, the same way in
// every monolock command: GNU style (--flag ARG, a one-letter flag as -v),
// as the docs spell them, with the defaults.
package flaghelp

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Options says what differs between commands. The zero value lists every
// flag with its default.
type Options struct {
	// Short maps one-letter spellings to their long flag's name. A short
	// spelling is a flag of its own in the FlagSet; it shares its long
	// flag's entry ("-w D, --timeout D", "-e, -x, --exclusive") instead
	// of having one.
	Short map[string]string
	// Arg names the argument of f, given the name flag.UnquoteUsage found
	// (the usage's `quoted` word, else "value", "int", "duration", ...).
	// Nil, or "" returned: that name in upper case, "int" as N.
	Arg func(f *flag.Flag, arg string) string
	// HideDefault leaves f's default out (a default the usage already
	// explains). Zero values ("", 0s, false) are always left out.
	HideDefault func(f *flag.Flag) bool
}

// Text is the list of fs's flags, one entry of two lines each.
func Text(fs *flag.FlagSet, o Options) string {
	shortOf := map[string][]string{} // in order: a map has none
	for short, long := range o.Short {
		shortOf[long] = append(shortOf[long], short)
	}
	for _, shorts := range shortOf {
		slices.Sort(shorts)
	}
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if _, isShort := o.Short[f.Name]; isShort {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		arg = argName(o, f, arg)
		b.WriteString("  ")
		for _, s := range shortOf[f.Name] {
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
		hide := o.HideDefault != nil && o.HideDefault(f)
		if !hide && f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	return b.String()
}

func argName(o Options, f *flag.Flag, arg string) string {
	if arg == "" {
		return "" // a bool flag
	}
	if o.Arg != nil {
		if name := o.Arg(f, arg); name != "" {
			return name
		}
	}
	if arg == "int" || arg == "uint" {
		return "N"
	}
	return strings.ToUpper(arg)
}
