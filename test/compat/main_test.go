package compat

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/wire"
)

const (
	user     = "compat"
	password = "compat-pass"
)

var (
	pg        *pglocal.Server
	proxyAddr *net.TCPAddr
	certFile  string // the proxy's self-signed certificate (also its CA)
	dbSeq     atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{N: 1})
		if err != nil {
			fmt.Fprintln(os.Stderr, "start PostgreSQL:", err)
			return 1
		}
		defer c.Stop()
		pg = c.Servers[0]
		if err := superExec(ctx, "postgres", fmt.Sprintf("CREATE ROLE %s LOGIN CREATEDB PASSWORD '%s'", user, password)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		dir, err := os.MkdirTemp("", "ordo-compat-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		var keyFile string
		certFile, keyFile, err = writeCert(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srv, err := wire.NewServer(wire.Config{
			BackendAddr:    pg.Addr(),
			TLSCertFile:    certFile,
			TLSKeyFile:     keyFile,
			AllowPlaintext: true,
			Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		proxyAddr = ln.Addr().(*net.TCPAddr)
		go srv.Serve(ln)
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
		}()
		return m.Run()
	}())
}

func superExec(ctx context.Context, db, sql string) error {
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// target is where a client connects: PostgreSQL directly or the proxy,
// each run with a fresh database of its own.
type target struct {
	name string // "direct" or "proxy"
	host string
	port int
	db   string
	tls  bool // the proxy terminates TLS; direct is plaintext
}

func (tg target) portStr() string { return strconv.Itoa(tg.port) }

// dsn is a libpq keyword/value connection string.
func (tg target) dsn() string {
	mode := "disable"
	if tg.tls {
		mode = "require"
	}
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s password=%s sslmode=%s", tg.host, tg.port, tg.db, user, password, mode)
}

// env is a libpq environment for psql/pgbench.
func (tg target) env() []string {
	mode := "disable"
	if tg.tls {
		mode = "require"
	}
	return append(os.Environ(), "PGHOST="+tg.host, "PGPORT="+tg.portStr(), "PGDATABASE="+tg.db,
		"PGUSER="+user, "PGPASSWORD="+password, "PGSSLMODE="+mode, "PGCONNECT_TIMEOUT=10")
}

// targets creates two fresh databases and returns the direct and the
// proxied target.
func targets(t *testing.T) [2]target {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out [2]target
	for i, name := range []string{"direct", "proxy"} {
		db := fmt.Sprintf("compat_%d_%s", dbSeq.Add(1), name)
		if err := superExec(ctx, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", db, user)); err != nil {
			t.Fatal(err)
		}
		out[i] = target{name: name, host: pg.Host, port: pg.Port, db: db}
		if name == "proxy" {
			out[i].host, out[i].port, out[i].tls = "127.0.0.1", proxyAddr.Port, true
		}
	}
	return out
}

// same runs run against both targets and requires identical output.
func same(t *testing.T, run func(t *testing.T, tg target) string) string {
	t.Helper()
	tgs := targets(t)
	direct := run(t, tgs[0])
	proxied := run(t, tgs[1])
	if direct != proxied {
		t.Fatalf("output differs\n--- direct\n%s\n--- through ordo\n%s", direct, proxied)
	}
	if direct == "" {
		t.Fatal("empty output")
	}
	return proxied
}

func writeCert(dir string) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ordo compat"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	cf, kf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	return cf, kf, nil
}
