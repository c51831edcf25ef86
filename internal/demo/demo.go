// Package demo runs a local Ordo cluster for people to try: N PostgreSQL
// servers started by pglocal, with one Ordo node in front of each.
//
// Run owns every process and goroutine it starts and stops them all before it
// returns, whatever the reason (context cancelled by Ctrl-C, an error while
// starting). It must never leave a PostgreSQL server or a listening port
// behind, and never delete a data directory the user named.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/wire"
)

// Options configures Run.
type Options struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// BasePort puts node i's Ordo port on BasePort+i-1 and its PostgreSQL
	// server on BasePort+100+i-1. Zero picks free ports.
	BasePort int
	// Dir keeps the cluster's data between runs (Dir/postgres/node1, …).
	// Empty means a temporary directory removed on exit.
	Dir string
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
	if o.BasePort < 0 || o.BasePort+100+o.Nodes > 65535 {
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

	var (
		servers  []*wire.Server
		nodes    []Node
		wg       sync.WaitGroup
		serveErr = make(chan error, o.Nodes)
	)
	defer func() {
		shutdownAll(servers, o.Logger)
		wg.Wait()
	}()
	for i, s := range pg.Servers {
		addr := "127.0.0.1:0"
		if o.BasePort != 0 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.BasePort+i))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("demo: %s: listen on %s (choose another --base-port): %w", s.Name, addr, err)
		}
		srv, err := wire.NewServer(wire.Config{
			ListenAddr:     ln.Addr().String(),
			BackendAddr:    s.Addr(),
			AllowPlaintext: true,
			Logger:         o.Logger.With("node", s.Name),
			Registerer:     prometheus.NewRegistry(),
		}, nil)
		if err != nil {
			ln.Close()
			return fmt.Errorf("demo: %s: %w", s.Name, err)
		}
		servers = append(servers, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, wire.ErrServerClosed) {
				serveErr <- fmt.Errorf("demo: %s: %w", s.Name, err)
			}
		}()
		nodes = append(nodes, Node{
			Name:     s.Name,
			Ordo:     connURL(ln.Addr().String(), s.User, s.Password),
			Postgres: s.DSN("postgres"),
		})
	}

	for _, n := range nodes {
		fmt.Fprintf(o.Out, "%s ordo=%s postgres=%s\n", n.Name, n.Ordo, n.Postgres)
	}
	fmt.Fprintf(o.Out, "\n%d nodes ready in %.1fs. Connect with e.g.\n  psql '%s'\n", len(nodes), time.Since(began).Seconds(), nodes[0].Ordo)
	if o.Dir != "" {
		fmt.Fprintf(o.Out, "Data is kept in %s.\n", o.Dir)
	}
	fmt.Fprintf(o.Out, "Press Ctrl-C to stop.\n")

	select {
	case <-ctx.Done():
		o.Logger.Info("shutting down")
		return nil
	case err := <-serveErr:
		return err
	}
}

func shutdownAll(servers []*wire.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(ctx); err != nil {
				log.Error("shutting down node", "err", err)
			}
		}()
	}
	wg.Wait()
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
