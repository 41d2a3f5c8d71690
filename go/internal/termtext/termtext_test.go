package termtext

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestField(t *testing.T) {
	for in, want := range map[string]string{
		"deploy/web":  "deploy/web",
		"jobs/é-ü":    "jobs/é-ü",
		"cn:deployer": "cn:deployer",
		"a b":         `"a b"`,
		`say"hi`:      `"say\"hi"`,
		`back\slash`:  `"back\\slash"`,
		"evil\x1b[31mRED\x1b]0;pwned\x07\r\nFAKE": `"evil\x1b[31mRED\x1b]0;pwned\a\r\nFAKE"`,
		"bidi\u202eevil": `"bidi\u202eevil"`,
		"bad\xffutf8":    `"bad\xffutf8"`,
		"tab\there":      `"tab\there"`,
		"del\x7f":        `"del\x7f"`,
		"c1\u009b":       `"c1\u009b"`,
	} {
		assert.Equal(t, want, Field(in), "%q", in)
	}
}

func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		`monolock run: acquired "x", token 5`: `monolock run: acquired "x", token 5`,
		"reason: evil\x1b[31m\r\nFAKE \xff é": `reason: evil\x1b[31m\r\nFAKE \xff é`,
		"title\x1b]0;pwned\x07":               `title\x1b]0;pwned\a`,
		"zero\u200bwidth \u202e":              `zero\u200bwidth \u202e`,
	} {
		assert.Equal(t, want, Line(in), "%q", in)
	}
}
