// Package demo runs a local Ordo cluster for people to try: N PostgreSQL
// servers started by pglocal, with one replicating Ordo node in front of
// each, the nodes authenticating each other with mutual TLS (a CA, node
// certificates and an admin client certificate for ordoctl made at every
// start in the data directory's certs/).
//
// Run owns every process and goroutine it starts and stops them all before it
// returns, whatever the reason (context cancelled by Ctrl-C, an error while
// starting). It must never leave a PostgreSQL server or a listening port
// behind, and never delete a data directory the user named.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/pkg/config"
)

// Options configures Run.
type Options struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// BasePort puts node i's Ordo port on BasePort+i-1, its PostgreSQL
	// server on BasePort+100+i-1, its Raft port on BasePort+200+i-1, its
	// metrics on BasePort+300+i-1 and its admin API on BasePort+400+i-1.
	// Zero picks free ports.
	BasePort int
	// Dir keeps the cluster's data between runs (Dir/postgres/node1, …,
	// Dir/ordo/node1, …). Empty means a temporary directory removed on exit.
	Dir string
	// Protocol is the termination protocol (default "dbsm").
	Protocol string
	// Out receives the connection strings, one line per node.
	Out io.Writer
	// Logger receives progress and errors.
	Logger *slog.Logger
}

// Node is one running demo node.
type Node struct {
	Name     string
	Ordo     string // connection URL of the node's Ordo port
	Postgres string // connection URL of the node's own PostgreSQL server
	Metrics  string // the node's Prometheus endpoint
	Admin    string // the node's admin API (host:port)
}

// Run starts the cluster, prints one line per node
//
//	node1 ordo=postgres://… postgres=postgres://…
//
// then serves until ctx is cancelled, and shuts everything down.
func Run(ctx context.Context, o Options) error {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Protocol == "" {
		o.Protocol = "dbsm"
	}
	if o.Nodes > config.MaxNodes {
		return fmt.Errorf("demo: at most %d nodes", config.MaxNodes)
	}
	if o.BasePort < 0 || o.BasePort+400+o.Nodes > 65535 {
		return fmt.Errorf("demo: base port %d out of range", o.BasePort)
	}
	pgOpts := pglocal.Options{N: o.Nodes, Fsync: true}
	if o.Dir != "" {
		pgOpts.Dir = filepath.Join(o.Dir, "postgres")
	}
	if o.BasePort != 0 {
		pgOpts.BasePort = o.BasePort + 100
	}
	began := time.Now()
	o.Logger.Info("starting PostgreSQL servers", "count", o.Nodes)
	pg, err := pglocal.Start(ctx, pgOpts)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		o.Logger.Info("stopping PostgreSQL servers")
		if err := pg.Stop(); err != nil {
			o.Logger.Error("stopping PostgreSQL servers", "err", err)
		}
	}()

	dataDir := o.Dir
	if dataDir == "" {
		dataDir = pg.Dir // removed with the PostgreSQL servers
	}
	port := func(offset, i int) string {
		if o.BasePort == 0 {
			return "127.0.0.1:0"
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(o.BasePort+offset+i))
	}
	// Every node's configuration names every peer: pick the addresses first.
	peers := map[uint32]string{}
	for i := range pg.Servers {
		if peers[uint32(i+1)], err = resolvePort(port(200, i)); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	// Mutual TLS between the nodes, as in a real deployment: a new CA and
	// node certificates at every start (nothing else depends on them).
	certDir := filepath.Join(dataDir, "certs")
	peerTLS, adminTLS, err := makeCerts(certDir, len(pg.Servers))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	var (
		running []*node.Node
		nodes   []Node
	)
	defer func() {
		for _, n := range running {
			n.Stop()
		}
	}()
	for i, s := range pg.Servers {
		listen, err := resolvePort(port(0, i))
		if err != nil {
			return fmt.Errorf("demo: %s: %w (choose another --base-port)", s.Name, err)
		}
		metrics, err := resolvePort(port(300, i))
		if err != nil {
			return fmt.Errorf("demo: %s: %w (choose another --base-port)", s.Name, err)
		}
		cfg := &config.Node{
			// the admin port need not be known before the node starts
			// (127.0.0.1:0: the node binds a free one; AdminAddr says which)
			ID: uint32(i + 1), Listen: listen, PeerListen: peers[uint32(i+1)], MetricsListen: metrics, AdminListen: port(400, i),
			Postgres: s.DSN("postgres"), DataDir: filepath.Join(dataDir, "ordo", s.Name),
			Peers: peers, Protocol: o.Protocol, PeerTLS: peerTLS[i],
		}
		cfg.Defaults()
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("demo: %s: %w", s.Name, err)
		}
		n, err := node.Start(ctx, cfg, o.Logger)
		if err != nil {
			return fmt.Errorf("demo: %s: %w", s.Name, err)
		}
		running = append(running, n)
		nodes = append(nodes, Node{
			Name:     s.Name,
			Ordo:     connURL(n.ClientAddr(), s.User, s.Password),
			Postgres: s.DSN("postgres"),
			Metrics:  "http://" + metrics + "/metrics",
			Admin:    n.AdminAddr(),
		})
	}
	failed := make(chan error, len(running))
	for _, n := range running {
		go func() { failed <- n.Wait(ctx) }()
	}

	for _, n := range nodes {
		fmt.Fprintf(o.Out, "%s ordo=%s postgres=%s\n", n.Name, n.Ordo, n.Postgres)
	}
	fmt.Fprintf(o.Out, "\n%d nodes ready in %.1fs (protocol %s); every node is writable. Connect with e.g.\n  psql '%s'\n",
		len(nodes), time.Since(began).Seconds(), o.Protocol, nodes[0].Ordo)
	fmt.Fprintf(o.Out, "postgres= is each node's own server, to look at: a write there bypasses Ordo, is not replicated,\n"+
		"and leaves that node's data unlike the others' (a node found diverged leaves the cluster).\n"+
		"For a baseline beside the cluster, use another database on that server.\n")
	fmt.Fprintf(o.Out, "Metrics: %s (and the other nodes' ports).\n", nodes[0].Metrics)
	admins := make([]string, len(nodes))
	for i, n := range nodes {
		admins[i] = n.Admin
	}
	fmt.Fprintf(o.Out, "Administer it (docs/admin.md) with\n  %s\n", ordoctlCommand(admins, adminTLS))
	if o.Dir != "" {
		fmt.Fprintf(o.Out, "Data is kept in %s.\n", o.Dir)
	}
	fmt.Fprintf(o.Out, "Press Ctrl-C to stop.\n")

	select {
	case <-ctx.Done():
		o.Logger.Info("shutting down")
		return nil
	case err := <-failed:
		if err != nil {
			return fmt.Errorf("demo: a node failed: %w", err)
		}
		return nil
	}
}

// makeCerts writes a CA, the certificates of nodes 1…n and the client
// certificate "admin" into dir, replacing earlier ones, and returns each
// node's peer_tls and the admin client's files (CA in CAFile).
func makeCerts(dir string, n int) ([]config.PeerTLS, config.PeerTLS, error) {
	o := certs.Options{Dir: dir, Overwrite: true}
	if _, err := certs.CreateCA(o); err != nil {
		return nil, config.PeerTLS{}, err
	}
	ca := filepath.Join(dir, certs.CACertFile)
	var out []config.PeerTLS
	for i := 1; i <= n; i++ {
		if _, err := certs.CreateNode(o, uint64(i), []string{"127.0.0.1", "localhost"}); err != nil {
			return nil, config.PeerTLS{}, err
		}
		cert, key := certs.NodeFiles(uint64(i))
		out = append(out, config.PeerTLS{CertFile: filepath.Join(dir, cert), KeyFile: filepath.Join(dir, key), CAFile: ca})
	}
	if _, err := certs.CreateClient(o, "admin"); err != nil {
		return nil, config.PeerTLS{}, err
	}
	cert, key := certs.ClientFiles("admin")
	return out, config.PeerTLS{CertFile: filepath.Join(dir, cert), KeyFile: filepath.Join(dir, key), CAFile: ca}, nil
}

// ordoctlCommand is the ordoctl command line that shows the status of the
// nodes whose admin APIs listen on endpoints, authenticated with the client
// certificate in client (what Run prints).
func ordoctlCommand(endpoints []string, client config.PeerTLS) string {
	return fmt.Sprintf("%s status --endpoints %s --cacert %s --cert %s --key %s",
		ordoctlPath(), strings.Join(endpoints, ","), client.CAFile, client.CertFile, client.KeyFile)
}

// ordoctlPath is the ordoctl beside the running executable (make demo
// builds both into bin/), else "ordoctl" from the PATH.
func ordoctlPath() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "ordoctl")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return "ordoctl"
}

// resolvePort turns "host:0" into a free port now, so addresses can be
// written into every node's configuration before the nodes start.
func resolvePort(addr string) (string, error) {
	if !strings.HasSuffix(addr, ":0") {
		return addr, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func connURL(addr, user, password string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     addr,
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	return u.String()
}
