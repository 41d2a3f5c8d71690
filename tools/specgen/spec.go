package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// errorEntry is one code of spec/errors.json.
type errorEntry struct {
	Code      uint8  `json:"code"`
	Name      string `json:"name"`
	Text      string `json:"text"`
	Temporary bool   `json:"temporary"`
	Retry     string `json:"retry"`
}

type errorTable struct {
	FirstTerminalCode uint8        `json:"first_terminal_code"`
	Errors            []errorEntry `json:"errors"`
}

// constant is one value of spec/constants.json, named by its path of keys.
type constant struct {
	Path  []string
	Value string // the JSON literal: a number as the spec spells it, or a quoted string
	Kind  kind
}

type kind int

const (
	kindInt kind = iota
	kindFloat
	kindString
)

// spec is everything the generators read.
type spec struct {
	Errors    errorTable
	Constants []constant
}

func loadSpec(root string) (*spec, error) {
	var s spec
	raw, err := os.ReadFile(filepath.Join(root, "spec", "errors.json"))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var tab struct {
		errorTable
		Description         string            `json:"description"`
		UnknownCodeExamples []json.RawMessage `json:"unknown_code_examples"`
	}
	if err := dec.Decode(&tab); err != nil {
		return nil, fmt.Errorf("spec/errors.json: %w", err)
	}
	s.Errors = tab.errorTable
	seen := map[uint8]bool{}
	for i, e := range s.Errors.Errors {
		if e.Name == "" || e.Text == "" || seen[e.Code] {
			return nil, fmt.Errorf("spec/errors.json: entry %d (code %#x): needs a name, a text and a code of its own", i, e.Code)
		}
		if e.Temporary != (e.Code < s.Errors.FirstTerminalCode) {
			return nil, fmt.Errorf("spec/errors.json: %s: temporary must be code < first_terminal_code", e.Name)
		}
		seen[e.Code] = true
	}
	raw, err = os.ReadFile(filepath.Join(root, "spec", "constants.json"))
	if err != nil {
		return nil, err
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if s.Constants, err = walkConstants(dec, nil); err != nil {
		return nil, fmt.Errorf("spec/constants.json: %w", err)
	}
	return &s, nil
}

// walkConstants reads one JSON value and returns its leaves in the file's
// order (a map would lose it). Numbers are values; a string is a value only
// when it has no space, since prose (descriptions, rules) is for people.
// Arrays are skipped: the one there is (client_message_types) restates the
// message types.
func walkConstants(dec *json.Decoder, path []string) ([]constant, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			for dec.More() {
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token()
			return nil, err
		}
		var out []constant
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return nil, err
			}
			sub, err := walkConstants(dec, append(append([]string(nil), path...), key.(string)))
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
		_, err := dec.Token()
		return out, err
	case json.Number:
		k := kindInt
		if strings.ContainsAny(t.String(), ".eE") {
			k = kindFloat
		}
		return []constant{{Path: path, Value: t.String(), Kind: k}}, nil
	case string:
		if strings.Contains(t, " ") {
			return nil, nil
		}
		q, _ := json.Marshal(t)
		return []constant{{Path: path, Value: string(q), Kind: kindString}}, nil
	case bool, nil:
		return nil, fmt.Errorf("%s: no generator handles %v", strings.Join(path, "."), t)
	}
	return nil, io.ErrUnexpectedEOF
}

// words splits a spec name (SHUTTING_DOWN, lease_ms) into lower-case words.
func words(parts ...string) []string {
	var out []string
	for _, p := range parts {
		for _, w := range strings.Split(p, "_") {
			if w != "" {
				out = append(out, strings.ToLower(w))
			}
		}
	}
	return out
}

// initialisms stay in capitals in Go and Python names (Go's convention and
// PEP 8's: NameNotUTF8), where TypeScript and Rust write them as one word
// (NameNotUtf8Error, NameNotUtf8).
var initialisms = map[string]bool{
	"acl": true, "api": true, "http": true, "id": true, "ip": true, "json": true,
	"ms": true, "rtt": true, "srtt": true, "tcp": true, "tls": true, "ttl": true,
	"url": true, "utf8": true,
}

func title(w string) string { return strings.ToUpper(w[:1]) + w[1:] }

// capWords joins words in CapWords, keeping initialisms in capitals if asked.
func capWords(ws []string, keepInitialisms bool) string {
	var b strings.Builder
	for _, w := range ws {
		if keepInitialisms && initialisms[w] {
			b.WriteString(strings.ToUpper(w))
		} else {
			b.WriteString(title(w))
		}
	}
	return b.String()
}

func camel(ws []string) string {
	if len(ws) == 0 {
		return ""
	}
	return ws[0] + capWords(ws[1:], false)
}

func upperSnake(ws []string) string { return strings.ToUpper(strings.Join(ws, "_")) }

// Per-language names of an error code, derived from the spec's name.
func goErrName(e errorEntry) string   { return "Err" + capWords(words(e.Name), true) }
func pyErrName(e errorEntry) string   { return capWords(words(e.Name), true) }
func tsErrName(e errorEntry) string   { return capWords(words(e.Name), false) + "Error" }
func rustErrName(e errorEntry) string { return capWords(words(e.Name), false) }

// errDoc is the one-paragraph description of a code that every language's
// doc comment carries: what the spec says, nothing re-typed.
func errDoc(e errorEntry) string {
	doc := fmt.Sprintf("0x%02x %s: %q.", e.Code, e.Name, e.Text)
	// The retry advice of a terminal code starts with "Terminal"; say the
	// class only where it does not.
	if !strings.HasPrefix(e.Retry, "Terminal") && !strings.HasPrefix(e.Retry, "Temporary") {
		if e.Temporary {
			doc += " Temporary."
		} else {
			doc += " Terminal."
		}
	}
	return strings.TrimSpace(doc + " " + e.Retry)
}

// wrap breaks text into lines of at most width characters.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// comment renders text as a comment block: each line is prefix + text.
func comment(b *strings.Builder, indent, prefix, text string, width int) {
	for _, l := range wrap(text, width) {
		fmt.Fprintf(b, "%s%s%s\n", indent, prefix, l)
	}
}

func hex2(v uint8) string { return fmt.Sprintf("0x%02x", v) }

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
