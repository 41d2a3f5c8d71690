package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	beginMarker = "<!-- BEGIN GENERATED: go run mage.go gen from spec/errors.json; do not edit -->"
	endMarker   = "<!-- END GENERATED -->"
)

// genDocs replaces the marked section of docs/errors.md with the table of
// codes and each client's name for them; the prose around it is hand-written.
func genDocs(root string, s *spec) ([]output, error) {
	const rel = "docs/errors.md"
	page, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	begin := bytes.Index(page, []byte(beginMarker))
	end := bytes.Index(page, []byte(endMarker))
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("%s: needs a %q line and a later %q line", rel, beginMarker, endMarker)
	}
	var t strings.Builder
	t.WriteString(beginMarker + "\n\n")
	t.WriteString("| code | name | canonical text | class | Go | Python | Node | Rust |\n")
	t.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, e := range s.Errors.Errors {
		class := "terminal"
		if e.Temporary {
			class = "temporary"
		}
		fmt.Fprintf(&t, "| `%s` | %s | %s | %s | `protocol.%s` | `%s` | `%s` | `Error::%s` |\n",
			hex2(e.Code), e.Name, e.Text, class, goErrName(e), pyErrName(e), tsErrName(e), rustErrName(e))
	}
	t.WriteString("\n")
	out := append(append(append([]byte(nil), page[:begin]...), t.String()...), page[end:]...)
	return []output{{rel, out}}, nil
}
