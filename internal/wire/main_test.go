package wire

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/prometheus/client_golang/prometheus"
)

// pg is the PostgreSQL server every test in this package talks to.
var pg *pglocal.Server

// pgVersion is its version.
var pgVersion pglocal.Version

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{
			N: 1,
			HBA: []string{
				"host all trustuser 127.0.0.1/32 trust",
				"host all md5user 127.0.0.1/32 md5",
			},
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "start PostgreSQL:", err)
			return 1
		}
		defer c.Stop()
		pg, pgVersion = c.Servers[0], c.Version
		if err := setupRoles(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "set up roles:", err)
			return 1
		}
		return m.Run()
	}())
}

func setupRoles(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE ROLE trustuser LOGIN`,
		`SET password_encryption = 'md5'`,
		`CREATE ROLE md5user LOGIN PASSWORD 'md5pass'`,
		`SET password_encryption = 'scram-sha-256'`,
		`CREATE ROLE scramuser LOGIN PASSWORD 'scrampass'`,
		`GRANT ALL ON SCHEMA public TO trustuser, md5user, scramuser`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// proxy is a running Server for one test.
type proxy struct {
	srv  *Server
	addr string
	reg  *prometheus.Registry
	done chan error
}

// startProxy starts a Server in front of pg; mod adjusts the config.
func startProxy(t testing.TB, hooks Hooks, mod func(*Config)) *proxy {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{
		BackendAddr:    pg.Addr(),
		AllowPlaintext: true,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Registerer:     reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := NewServer(cfg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{srv: srv, addr: ln.Addr().String(), reg: reg, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-p.done; err != ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return p
}

// dsn returns a connection string through the proxy.
func (p *proxy) dsn(user, password, extra string) string {
	host, port, _ := net.SplitHostPort(p.addr)
	s := fmt.Sprintf("host=%s port=%s user=%s dbname=postgres sslmode=disable", host, port, user)
	if password != "" {
		s += " password=" + password
	}
	if extra != "" {
		s += " " + extra
	}
	return s
}

// superDSN connects through the proxy as the harness superuser.
func (p *proxy) superDSN(extra string) string { return p.dsn(pg.User, pg.Password, extra) }

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %q: %v", dsn, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// pglocal_Start starts a separate single PostgreSQL server with the same
// roles as the shared one.
func pglocal_Start(ctx context.Context) (*pglocal.Cluster, error) {
	c, err := pglocal.Start(ctx, pglocal.Options{N: 1, HBA: []string{"host all trustuser 127.0.0.1/32 trust"}})
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, c.Servers[0].DSN("postgres"))
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE ROLE trustuser LOGIN")
		conn.Close(ctx)
	}
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}
