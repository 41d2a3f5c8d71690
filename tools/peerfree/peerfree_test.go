package peerfree

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// On the benchmark's module: the report's chart package links gonum's
// plot, the peers' adapters link their clients, and the statistics link
// neither; a package with tests that links one must be listed as tested.
func TestSortsTheBenchmarksPackages(t *testing.T) {
	dir := filepath.Join("..", "..", "bench")
	peers := []string{"github.com/redis/go-redis/", "github.com/go-redsync/redsync/", "github.com/jackc/",
		"github.com/go-zookeeper/zk", "go.etcd.io/etcd/client/", "gonum.org/v1/plot"}
	charts := "github.com/monolock/monolock/bench/internal/charts"
	free, err := Packages(dir, peers, []string{charts})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(free, "github.com/monolock/monolock/bench/internal/stats") {
		t.Errorf("stats is peer-free, not in %v", free)
	}
	for _, p := range []string{charts, "github.com/monolock/monolock/bench/internal/peers"} {
		if slices.Contains(free, p) {
			t.Errorf("%s links a peer module, yet is listed as free", p)
		}
	}
	_, err = Packages(dir, peers, nil)
	if err == nil || !strings.Contains(err.Error(), charts+" (links gonum.org/v1/plot") {
		t.Fatalf("charts has tests and links gonum's plot, yet: %v", err)
	}
}
