package flaghelp

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestTextSpellsFlagsAsTheDocs(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("acl", "", "ACL `file`")
	fs.Int("max-sessions", 7, "at most this many")
	fs.Duration("drain-timeout", 10*time.Second, "wait this long")
	fs.Bool("json", false, "print JSON")
	fs.Bool("n", false, "no wait")
	fs.Bool("no-wait", false, "fail at once")
	fs.Bool("v", false, "verbose")
	assert.Equal(t, ""+
		"  --acl FILE\n        ACL file\n"+
		"  --drain-timeout DURATION\n        wait this long (default 10s)\n"+
		"  --json\n        print JSON\n"+
		"  --max-sessions N\n        at most this many (default 7)\n"+
		"  -n, --no-wait\n        fail at once\n"+
		"  -v\n        verbose\n",
		Text(fs, Options{Short: map[string]string{"n": "no-wait"}}))
}
