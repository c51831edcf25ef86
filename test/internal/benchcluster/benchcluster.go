// Package benchcluster starts what the cluster benchmarks measure (make
// bench-cluster, make bench-tpcc): PostgreSQL servers with fsync on
// (internal/pglocal) and an Ordo node in front of each, all in the
// calling process. It is for benchmarks only: it must never be used by
// a node, and tests use test/e2e's harness.
package benchcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/testport"
	"github.com/ordo-db/ordo/pkg/config"
)

// Options configures Start.
type Options struct {
	N        int    // nodes (default 3)
	Protocol string // every node's initial protocol
	// Load, if set, runs against each PostgreSQL server before the nodes
	// start (initial data every server gets identically).
	Load func(dsn string) error
	// Log receives the nodes' log (nil: discarded).
	Log io.Writer
	// MetricsPort, if set: node i serves /metrics on MetricsPort + i - 1.
	MetricsPort  int
	ApplyWorkers int // apply_workers (0: the default)
	// Delayable routes every node's traffic to every other node through
	// a link whose one-way delay SetDelay sets (zero until then).
	Delayable bool
	// Socket connects each node to its PostgreSQL server through the
	// server's Unix-domain socket instead of loopback TCP.
	Socket bool
	// LeaderStays turns leader_follows_writes off.
	LeaderStays bool
	// NoFlush, for analysis only: PostgreSQL runs with fsync off and the
	// nodes' data directories (their Raft logs) go to /dev/shm, so no
	// commit waits for a disk's flush.
	NoFlush bool
}

// Cluster is a running benchmark cluster.
type Cluster struct {
	DSNs    []string // each node's client port
	Servers []string // each node's own PostgreSQL
	Nodes   []*node.Node
	Configs []*config.Node
	pg      *pglocal.Cluster
	dir     string
	delay   atomic.Int64
	links   []*delayLink
}

// SetDelay sets the one-way delay between every two nodes (a cluster
// started with Delayable).
func (c *Cluster) SetDelay(d time.Duration) { c.delay.Store(int64(d)) }

// Start starts o.N PostgreSQL servers, runs o.Load on each, then starts
// a node in front of each.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.N == 0 {
		o.N = 3
	}
	pg, err := pglocal.Start(ctx, pglocal.Options{N: o.N, Fsync: !o.NoFlush, Socket: o.Socket})
	if err != nil {
		return nil, err
	}
	c := &Cluster{pg: pg}
	for _, s := range pg.Servers {
		if o.Load != nil {
			if err := o.Load(s.DSN("postgres")); err != nil {
				c.Stop()
				return nil, err
			}
		}
		c.Servers = append(c.Servers, s.DSN("postgres"))
	}
	nodesParent := ""
	if o.NoFlush {
		nodesParent = "/dev/shm"
	}
	if c.dir, err = os.MkdirTemp(nodesParent, "ordo-bench-nodes-"); err != nil {
		c.Stop()
		return nil, err
	}
	peers := map[uint32]string{}
	for i := 1; i <= o.N; i++ {
		if peers[uint32(i)], err = testport.Addr(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	logOut := o.Log
	if logOut == nil {
		logOut = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	for i, s := range pg.Servers {
		listen, err := testport.Addr()
		if err != nil {
			c.Stop()
			return nil, err
		}
		view := peers
		if o.Delayable {
			view = map[uint32]string{}
			for id, addr := range peers {
				if id == uint32(i+1) {
					view[id] = addr
					continue
				}
				l, err := newDelayLink(addr, &c.delay)
				if err != nil {
					c.Stop()
					return nil, err
				}
				c.links = append(c.links, l)
				view[id] = l.addr()
			}
		}
		dsn := s.DSN("postgres")
		if o.Socket {
			dsn = s.SocketDSN("postgres")
		}
		cfg := &config.Node{ID: uint32(i + 1), Listen: listen, PeerListen: peers[uint32(i+1)], Postgres: dsn,
			DataDir: filepath.Join(c.dir, s.Name), Peers: view, Protocol: o.Protocol}
		cfg.ApplyWorkers = o.ApplyWorkers
		if o.LeaderStays {
			stays := false
			cfg.LeaderFollowsWrites = &stays
		}
		if o.MetricsPort != 0 {
			cfg.MetricsListen = fmt.Sprintf("127.0.0.1:%d", o.MetricsPort+i)
		}
		cfg.Defaults()
		n, err := node.Start(ctx, cfg, log)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		c.Configs = append(c.Configs, cfg)
		c.DSNs = append(c.DSNs, fmt.Sprintf("postgres://ordo:ordo@%s/postgres?sslmode=disable", n.ClientAddr()))
	}
	return c, nil
}

// Stop stops the nodes and the servers and removes the nodes' data.
func (c *Cluster) Stop() {
	c.SetDelay(0)
	for _, n := range c.Nodes {
		n.Stop()
	}
	for _, l := range c.links {
		l.close()
	}
	c.pg.Stop()
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// PG returns the nodes' own PostgreSQL servers (for SampleCPU).
func (c *Cluster) PG() []*pglocal.Server { return c.pg.Servers }
