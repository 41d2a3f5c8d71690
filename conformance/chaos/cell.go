package chaos

import (
	"context"
	"sync"
	"time"

	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/go/testkit/cell"
)

// Cell is the cell under test (go/testkit/cell), each HA server reaching
// each etcd member through a fault proxy of its own, so that one server
// can be cut off from etcd while it still serves its clients.
type Cell struct {
	*cell.Cell

	mu sync.Mutex
	// etcdLinks[i] carries server i's traffic to every etcd member.
	etcdLinks map[int][]*proxy.Proxy
}

// StartCell starts the cell of o (its EtcdLink is set here).
func StartCell(ctx context.Context, o cell.Options) (*Cell, error) {
	c := &Cell{etcdLinks: map[int][]*proxy.Proxy{}}
	o.EtcdLink = func(server, _ int, endpoint string) (string, error) {
		p, err := proxy.Listen(endpoint, time.Now())
		if err != nil {
			return "", err
		}
		c.mu.Lock()
		c.etcdLinks[server] = append(c.etcdLinks[server], p)
		c.mu.Unlock()
		return p.Addr(), nil
	}
	var err error
	if c.Cell, err = cell.Start(ctx, o); err != nil {
		c.closeLinks()
		return nil, err
	}
	return c, nil
}

// CutFromEtcd cuts server i off from every etcd member, or restores its
// links: while cut, nothing passes either way and no connection is closed,
// as in a network partition. Its clients still reach it.
func (c *Cell) CutFromEtcd(i int, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.etcdLinks[i] {
		p.Set(proxy.Faults{Blackhole: [2]bool{cut, cut}})
	}
}

// Close stops every process, then the links.
func (c *Cell) Close() error {
	err := c.Cell.Close()
	c.closeLinks()
	return err
}

func (c *Cell) closeLinks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, links := range c.etcdLinks {
		for _, p := range links {
			p.Close()
		}
	}
}
