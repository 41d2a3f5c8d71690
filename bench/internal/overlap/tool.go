package overlap

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// toolList is the repository's list of system tools, relative to its root.
const toolList = "scripts/system-tools.tsv"

// LookTool finds the system tool name as the repository's helpers do
// (scripts/lib/system-tools.sh): it must be declared in
// scripts/system-tools.tsv, and installed, else the error names its Debian
// package and the command that installs it.
func LookTool(name string) (string, error) {
	list, err := findList()
	if err != nil {
		return "", err
	}
	f, err := os.Open(list)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) < 4 || cols[0] != name {
			continue
		}
		pkg, path, group := cols[1], cols[2], cols[3]
		hint := "go run mage.go deps (apt-get install " + pkg + ")"
		if group == "bench" {
			hint = "bash bench/scripts/peers.sh install (apt-get install " + pkg + ")"
		}
		missing := fmt.Errorf("%s is not installed (Debian package %s): run %s", name, pkg, hint)
		if path == "-" {
			p, err := exec.LookPath(name)
			if err != nil {
				return "", missing
			}
			return p, nil
		}
		if _, err := os.Stat(path); err != nil {
			return "", missing
		}
		return path, nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s is not on %s: declare it there (name, Debian package, path, group) so that a new machine installs it", name, list)
}

// findList looks for the list from the working directory upwards.
func findList() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, toolList)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory", toolList)
		}
		dir = parent
	}
}
