// Package e2e runs real Ordo clusters: real PostgreSQL servers from the
// harness, real Ordo nodes with Raft over gRPC on loopback, and real client
// drivers connecting through the nodes' ports.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/testport"
	"github.com/ordo-db/ordo/pkg/config"
)

// cluster is a running test cluster.
type cluster struct {
	t     testing.TB
	pg    *pglocal.Cluster
	cfgs  []*config.Node
	nodes []*node.Node
	dir   string
	// more are PostgreSQL servers started after the cluster (nodes that
	// join), stopped with it.
	more []*pglocal.Cluster
	// logs, if set before a node starts, receives its log (Info and
	// above), beside ORDO_TEST_LOG's.
	logs io.Writer
}

// freeAddr returns a free loopback address below the kernel's ephemeral
// port range, so that a node restarted on it does not find its port taken by
// some outgoing connection in the meantime (testport.Addr: a port is handed
// out once, to these clusters and proccluster's, and is locked against
// other test processes).
func freeAddr(t testing.TB) string {
	addr, err := testport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startCluster starts n PostgreSQL servers and n Ordo nodes in front of
// them running protocol.
func startCluster(t testing.TB, n int, protocol string) *cluster {
	return startClusterWith(t, n, protocol, nil)
}

// startClusterWith is startCluster with a hook to adjust each node's
// configuration before the nodes start.
func startClusterWith(t testing.TB, n int, protocol string, adjust func(*config.Node)) *cluster {
	return newCluster(t, n, protocol, adjust, false)
}

// newCluster is startClusterWith; with staggered, it starts the servers
// and configures the nodes, and the test starts each node (startNode).
func newCluster(t testing.TB, n int, protocol string, adjust func(*config.Node), staggered bool) *cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := pglocal.Options{N: n, Socket: true} // TCP for the nodes unless a test says otherwise
	if os.Getenv("ORDO_TEST_PG_LOG_STATEMENTS") != "" {
		// Every statement in the servers' logs, with its xid, and every
		// Parse and Bind (debug2): to follow what a session sent (the
		// session fuzzer copies node 1's log).
		opts.Settings = map[string]string{"log_statement": "all", "log_line_prefix": "%m [%p] %x ", "log_min_messages": "debug2"}
	}
	pg, err := pglocal.Start(ctx, opts)
	require.NoError(t, err)
	t.Logf("%d nodes on %s (%s)", n, pg.Version, pg.BinDir)
	c := &cluster{t: t, pg: pg, dir: t.TempDir()}
	t.Cleanup(c.stop)
	peers := map[uint32]string{}
	for i := 0; i < n; i++ {
		peers[uint32(i+1)] = freeAddr(t)
	}
	for i := 0; i < n; i++ {
		cfg := &config.Node{
			ID: uint32(i + 1), Listen: freeAddr(t), PeerListen: peers[uint32(i+1)],
			Postgres: pg.Servers[i].DSN("postgres"), DataDir: filepath.Join(c.dir, fmt.Sprintf("node%d", i+1)),
			Peers: peers, Protocol: protocol, CommitTimeout: 20 * time.Second, ProposeTimeout: 3 * time.Second,
		}
		if adjust != nil {
			adjust(cfg)
		}
		cfg.Defaults()
		require.NoError(t, cfg.Validate())
		c.cfgs = append(c.cfgs, cfg)
	}
	c.nodes = make([]*node.Node, n)
	if !staggered {
		for i := range c.cfgs {
			c.startNode(i)
		}
	}
	return c
}

func (c *cluster) logger(i int) *slog.Logger {
	w, level := io.Discard, slog.LevelInfo
	if v := os.Getenv("ORDO_TEST_LOG"); v != "" {
		w = os.Stderr
		if v == "debug" {
			level = slog.LevelDebug
		}
	}
	if c.logs != nil {
		w = io.MultiWriter(w, c.logs)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("test_node", i+1)
}

func (c *cluster) startNode(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nd, err := node.Start(ctx, c.cfgs[i], c.logger(i))
	require.NoError(c.t, err, "start node %d", i+1)
	c.nodes[i] = nd
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		if n != nil {
			n.Stop()
		}
	}
	c.pg.Stop()
	for _, pg := range c.more {
		pg.Stop()
	}
}

// dsn is the connection string of node i's Ordo port.
func (c *cluster) dsn(i int) string {
	return fmt.Sprintf("postgres://ordo:ordo@%s/postgres?sslmode=disable", c.cfgs[i].Listen)
}

// connect opens a pgx connection through node i.
func (c *cluster) connect(i int) *pgx.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn(i))
	require.NoError(c.t, err)
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// connectWith opens a pgx connection through node i whose startup packet
// also sets params (as a connection string's options would).
func (c *cluster) connectWith(i int, params map[string]string) *pgx.Conn {
	cfg, err := pgx.ParseConfig(c.dsn(i))
	require.NoError(c.t, err)
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// direct opens a pgx connection to node i's own PostgreSQL, bypassing Ordo.
func (c *cluster) direct(i int) *pgx.Conn {
	conn, err := pgx.Connect(context.Background(), c.pg.Servers[i].DSN("postgres"))
	require.NoError(c.t, err)
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// waitConverged waits until every node has applied what node 0 has.
func (c *cluster) waitConverged() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		require.NoError(c.t, n.Replica().SyncRead(ctx))
	}
}

// requireConverged waits until every node has applied what node 0 has,
// then requires each table to hold the same rows on every node.
func (c *cluster) requireConverged(tables ...string) {
	c.t.Helper()
	c.waitConverged()
	for i := 1; i < len(c.nodes); i++ {
		c.requireSame(0, i, tables)
	}
}

// checksum returns an md5 of table's rows ordered by primary key, read
// directly from node i's PostgreSQL.
func (c *cluster) checksum(i int, table string) string {
	var sum string
	err := c.direct(i).QueryRow(context.Background(),
		fmt.Sprintf("SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), 'empty') FROM %s t", table)).Scan(&sum)
	require.NoError(c.t, err)
	return sum
}
