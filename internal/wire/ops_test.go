package wire

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMaxConns(t *testing.T) {
	p := startProxy(t, nil, func(c *Config) { c.MaxConns = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := connect(t, p.superDSN(""))
	connect(t, p.superDSN(""))
	_, err := pgx.Connect(ctx, p.superDSN(""))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeTooManyConnections {
		t.Fatalf("want 53300, got %v", err)
	}
	// A cancel request is not a session and is not refused.
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx)
	waitFor(t, func() bool { return len(p.srv.sessionsSnapshot()) == 1 })
	connect(t, p.superDSN(""))
	if got := testutil.ToFloat64(p.srv.m.connsRejected.WithLabelValues("max_conns")); got != 1 {
		t.Errorf("max_conns rejections = %v", got)
	}
}

func TestIdleTimeouts(t *testing.T) {
	p := startProxy(t, nil, func(c *Config) {
		c.IdleTimeout = 300 * time.Millisecond
		c.IdleInTxTimeout = 400 * time.Millisecond
	})
	// Busy is not idle: a statement longer than the timeouts completes.
	r := dialRaw(t, p.addr, "trustuser")
	r.send(q("BEGIN; SELECT pg_sleep(0.8)"))
	if got := r.untilReady(); got[len(got)-16:] != "ReadyForQuery T\n" {
		t.Fatalf("long statement: %s", got)
	}
	if e := r.readError(); e == nil || e.Code != codeIdleInTxTimeout {
		t.Fatalf("idle in transaction: want 25P03, got %+v", e)
	}
	r2 := dialRaw(t, p.addr, "trustuser")
	start := time.Now()
	if e := r2.readError(); e == nil || e.Code != codeIdleSessionTimeout {
		t.Fatalf("idle: want 57P05, got %+v", e)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("idle timeout after %v", d)
	}
}

func TestShutdown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	reg := prometheus.NewRegistry()
	srv, err := NewServer(Config{BackendAddr: pg.Addr(), AllowPlaintext: true, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	addr := ln.Addr().String()

	idle := dialRaw(t, addr, "trustuser")
	inTx := dialRaw(t, addr, "trustuser")
	inTx.send(q("BEGIN"))
	inTx.untilReady()
	stuck := dialRaw(t, addr, "trustuser")
	stuck.send(q("BEGIN"))
	stuck.untilReady()
	if got := testutil.ToFloat64(srv.m.connsActive); got != 3 {
		t.Fatalf("active connections %v", got)
	}
	if got := testutil.ToFloat64(srv.m.bytesOut); got == 0 {
		t.Fatal("no bytes counted")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()

	if e := idle.readError(); e == nil || e.Code != codeAdminShutdown {
		t.Fatalf("idle session: want 57P01, got %+v", e)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("listener still accepting during shutdown")
	}
	// The open transaction may finish, then its session ends.
	inTx.send(q("SELECT 1"))
	if got := inTx.untilReady(); got != "RowDescription ?column?:23\nDataRow \"1\"\nCommandComplete SELECT 1\nReadyForQuery T\n" {
		t.Fatalf("in-transaction session during shutdown: %s", got)
	}
	inTx.send(q("COMMIT"))
	inTx.untilReady()
	if e := inTx.readError(); e == nil || e.Code != codeAdminShutdown {
		t.Fatalf("after commit: want 57P01, got %+v", e)
	}
	// The stuck one is terminated when ctx ends.
	if e := stuck.readError(); e == nil || e.Code != codeAdminShutdown {
		t.Fatalf("stuck session: want 57P01, got %+v", e)
	}
	if err := <-shut; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
	if got := testutil.ToFloat64(srv.m.connsActive); got != 0 {
		t.Fatalf("active connections after shutdown %v", got)
	}
}

func TestBackendDownAndBack(t *testing.T) {
	// Its own PostgreSQL server, since this test stops it.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := pglocal_Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	own := c.Servers[0]
	p := startProxy(t, nil, func(cfg *Config) { cfg.BackendAddr = own.Addr() })
	dsn := p.dsn(own.User, own.Password, "")

	conn := connect(t, dsn)
	own.Kill()
	// The open session gets a clear error, not a hang.
	_, err = conn.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("query succeeded with PostgreSQL down")
	}
	// New sessions get 57P03 while it is down.
	_, err = pgx.Connect(ctx, dsn)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeCannotConnectNow {
		t.Fatalf("want 57P03 while down, got %v", err)
	}
	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn2 := connect(t, dsn)
	var n int
	if err := conn2.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after restart: %v", err)
	}
	// A clean restart while a session is open: PostgreSQL's own FATAL
	// (57P01) reaches the client.
	r := dialRaw(t, p.addr, "")
	r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}})
	_ = r.untilReady()
	if err := own.Stop(); err != nil {
		t.Fatal(err)
	}
	e := r.readError()
	if e == nil || e.Severity != "FATAL" || (e.Code != codeAdminShutdown && e.Code != codeConnectionFailure) {
		t.Fatalf("want FATAL 57P01/08006, got %+v", e)
	}
	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}
