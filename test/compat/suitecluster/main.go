// Command suitecluster runs the servers `make compat-suites`
// (scripts/compat-suites.sh) measures drivers' own test suites against: a
// cluster of `ordo start` processes (test/internal/proccluster) replicating
// the database the suites expect, and one plain PostgreSQL server set up
// the same way (the same binaries, settings, roles and database), so that
// a suite run through Ordo and directly differs only by Ordo.
//
// On every server, before any node starts, it creates the roles the suites
// log in as and their database:
//
//	test      LOGIN, password "test", owner of the database
//	postgres  LOGIN SUPERUSER, password "postgres"
//	database  test (owned by test)
//
// It writes a shell file of variables (-env) naming the addresses
//
//	ORDO_HOSTS="127.0.0.1 …"  ORDO_PORTS="… … …"   (node 1 first)
//	DIRECT_HOST=127.0.0.1     DIRECT_PORT=…
//	ORDO_LOGS="…/node1.log …" DIRECT_LOG=…
//
// then serves until its standard input closes or it receives SIGINT or
// SIGTERM, and stops every process it started. Node logs are kept in -dir.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/test/internal/proccluster"
)

// Database is the database every suite connects to.
const Database = "test"

// roles are created on every server before anything else runs.
var setup = []string{
	"CREATE ROLE test LOGIN PASSWORD 'test'",
	"CREATE ROLE postgres LOGIN SUPERUSER PASSWORD 'postgres'",
	"CREATE DATABASE " + Database + " OWNER test",
}

func main() {
	dir := flag.String("dir", "", "directory for the nodes' configurations, data and logs (required)")
	env := flag.String("env", "", "write the servers' addresses to this file as shell variables (required)")
	nodes := flag.Int("nodes", 3, "number of Ordo nodes")
	protocol := flag.String("protocol", "dbsm", "termination protocol")
	bin := flag.String("bin", "", "the ordo binary (default: built into -dir)")
	flag.Parse()
	if *dir == "" || *env == "" {
		fmt.Fprintln(os.Stderr, "usage: suitecluster -dir DIR -env FILE [-nodes N] [-protocol P] [-bin ordo]")
		os.Exit(2)
	}
	if err := run(*dir, *env, *nodes, *protocol, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "suitecluster:", err)
		os.Exit(1)
	}
}

func run(dir, envFile string, nodes int, protocol, bin string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	direct, err := pglocal.Start(ctx, pglocal.Options{N: 1})
	if err != nil {
		return err
	}
	defer direct.Stop()
	if err := prepare(ctx, direct); err != nil {
		return fmt.Errorf("direct server: %w", err)
	}
	c, err := proccluster.Start(ctx, proccluster.Options{
		N: nodes, Protocol: protocol, Dir: abs, Bin: bin, Database: Database, Prepare: prepare,
		StartTimeout: 120 * time.Second,
	})
	if err != nil {
		return err
	}
	defer c.Stop()

	var hosts, ports, logs []string
	for i := 0; i < c.N(); i++ {
		h, p, err := net.SplitHostPort(c.Addr(i))
		if err != nil {
			return err
		}
		hosts, ports, logs = append(hosts, h), append(ports, p), append(logs, c.LogFile(i))
	}
	d := direct.Servers[0]
	vars := fmt.Sprintf("ORDO_HOSTS=%q\nORDO_PORTS=%q\nORDO_LOGS=%q\nDIRECT_HOST=%q\nDIRECT_PORT=%d\nDIRECT_LOG=%q\nPG_VERSION=%q\n",
		strings.Join(hosts, " "), strings.Join(ports, " "), strings.Join(logs, " "),
		d.Host, d.Port, d.LogFile, direct.Version.Full)
	tmp := envFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(vars), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, envFile); err != nil {
		return err
	}
	fmt.Printf("suitecluster: ready (%d nodes, protocol %s, %s)\n", c.N(), protocol, direct.Version)

	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return nil
}

// prepare creates the suites' roles and database on every server of pg.
func prepare(ctx context.Context, pg *pglocal.Cluster) error {
	var errs []error
	for _, s := range pg.Servers {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			return err
		}
		for _, q := range setup {
			if _, err := conn.Exec(ctx, q); err != nil && !strings.Contains(err.Error(), "already exists") {
				errs = append(errs, fmt.Errorf("%s: %s: %w", s.Name, q, err))
			}
		}
		conn.Close(ctx)
	}
	return errors.Join(errs...)
}
