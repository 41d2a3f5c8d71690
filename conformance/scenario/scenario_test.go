package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpecScenariosLoad(t *testing.T) {
	scs, err := LoadDir(filepath.Join("..", "..", "spec", "scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	backends := map[string]int{}
	for _, s := range scs {
		backends[s.Backend]++
	}
	for _, b := range []string{BackendServer, BackendFake, BackendProxy} {
		if backends[b] == 0 {
			t.Errorf("no scenario uses back end %s", b)
		}
	}
}

func TestLoadRejectsMistakes(t *testing.T) {
	cases := map[string]string{
		"unknown field":   `{"description": "d", "backend": "fake", "steps": [], "stpes": []}`,
		"unknown op":      `{"description": "d", "backend": "fake", "steps": [{"op": "sned"}]}`,
		"no description":  `{"backend": "fake", "steps": []}`,
		"bad backend":     `{"description": "d", "backend": "mock", "steps": []}`,
		"op vs backend":   `{"description": "d", "backend": "server", "steps": [{"op": "accept", "conn": "c1"}]}`,
		"conn not known":  `{"description": "d", "backend": "fake", "steps": [{"op": "send", "conn": "c1", "hex": "11"}]}`,
		"bad hex":         `{"description": "d", "backend": "fake", "steps": [{"op": "accept", "conn": "c1"}, {"op": "send", "conn": "c1", "hex": "1"}]}`,
		"id not acquired": `{"description": "d", "backend": "fake", "steps": [{"op": "expect", "id": "a", "event": "acquired"}]}`,
		"unknown event":   `{"description": "d", "backend": "fake", "steps": [{"op": "acquire", "id": "a", "name": "a", "lease_ms": 1, "mode": "wait"}, {"op": "expect", "id": "a", "event": "granted"}]}`,
		"two names":       `{"description": "d", "backend": "fake", "steps": [{"op": "acquire", "id": "a", "name": "a", "name_hex": "61", "lease_ms": 1, "mode": "wait"}]}`,
		"unknown check":   `{"description": "d", "backend": "fake", "steps": [], "checks": [{"check": "vibes"}]}`,
		"check no field":  `{"description": "d", "backend": "fake", "steps": [], "checks": [{"check": "max_in_flight"}]}`,
		"server on fake":  `{"description": "d", "backend": "fake", "server": {"acl": []}, "steps": []}`,
		"tls no require":  `{"description": "d", "backend": "server", "server": {"tls": true}, "steps": []}`,
		"ca without tls":  `{"description": "d", "backend": "server", "server": {"client_ca": true}, "steps": []}`,
		"tls plain srv":   `{"description": "d", "backend": "server", "steps": [{"op": "acquire", "id": "a", "name": "a", "lease_ms": 1, "mode": "wait", "tls": {}}]}`,
		"unknown cert":    `{"description": "d", "backend": "server", "requires": ["tls"], "server": {"tls": true}, "steps": [{"op": "acquire", "id": "a", "name": "a", "lease_ms": 1, "mode": "wait", "tls": {"cert": "carol"}}]}`,
		"kick on fake":    `{"description": "d", "backend": "fake", "steps": [{"op": "kick", "name": "a"}]}`,
		"kick no name":    `{"description": "d", "backend": "server", "steps": [{"op": "kick"}]}`,
	}
	dir := t.TempDir()
	for desc, body := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(desc, " ", "-")+".json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadFile(p); err == nil {
			t.Errorf("%s: loaded without error", desc)
		}
	}
}

func TestDecodeHexAllowsSpaces(t *testing.T) {
	b, err := DecodeHex("01 01 000003e8\n0001 61")
	if err != nil || len(b) != 9 || b[8] != 'a' {
		t.Fatalf("%x, %v", b, err)
	}
}
