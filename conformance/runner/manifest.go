package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Client is one entry of a manifest: a driver program for one client.
type Client struct {
	Name string `json:"name"`
	// Dir is relative to the repository root; build and run start there.
	Dir   string   `json:"dir"`
	Build []string `json:"build,omitempty"`
	Run   []string `json:"run"`
	// Env is added to the environment of build and run.
	Env map[string]string `json:"env,omitempty"`
	// CaughtBy lists scenarios a mutant must fail (mutants manifest only).
	CaughtBy []string `json:"caught_by,omitempty"`
	// Note is free text for humans.
	Note string `json:"note,omitempty"`
}

// ExtraEnv returns Env as KEY=value entries, to add to this process's
// environment for the client's build and run.
func (c Client) ExtraEnv() []string {
	env := make([]string, 0, len(c.Env))
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// Manifest is conformance/manifest.json (or the mutants' manifest).
type Manifest struct {
	Description string   `json:"description,omitempty"`
	Clients     []Client `json:"clients"`
}

// LoadManifest reads a manifest and checks its entries.
func LoadManifest(path string) (*Manifest, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, c := range m.Clients {
		if c.Name == "" || len(c.Run) == 0 {
			return nil, fmt.Errorf("%s: every client needs name and run", path)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("%s: client %q listed twice", path, c.Name)
		}
		seen[c.Name] = true
	}
	return &m, nil
}

// LoadFailures reads dir/<client>.txt: scenario names, one a line, '#'
// starts a comment. A missing file is an empty list.
func LoadFailures(dir, client string) (map[string]bool, error) {
	out := map[string]bool{}
	if dir == "" {
		return out, nil
	}
	f, err := os.Open(filepath.Join(dir, client+".txt"))
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			out[line] = true
		}
	}
	return out, sc.Err()
}

// FindRoot walks up from dir to the repository root: the first directory
// holding both spec/ and conformance/.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if isDir(filepath.Join(dir, "spec")) && isDir(filepath.Join(dir, "conformance")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no repository root (spec/ and conformance/) above the working directory")
		}
		dir = parent
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
