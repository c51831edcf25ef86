package wire

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAuthPassthrough(t *testing.T) {
	p := startProxy(t, nil, nil)
	for _, tc := range []struct {
		user, password string
		wantCode       string // "" = success
	}{
		{"trustuser", "", ""},
		{"md5user", "md5pass", ""},
		{"md5user", "wrong", "28P01"},
		{"scramuser", "scrampass", ""},
		{"scramuser", "wrong", "28P01"},
		{"nosuchuser", "x", "28P01"},
	} {
		t.Run(tc.user+"/"+tc.password, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, p.dsn(tc.user, tc.password, ""))
			if tc.wantCode == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(ctx)
				var who string
				if err := c.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != tc.user {
					t.Fatalf("current_user %q %v", who, err)
				}
				return
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != tc.wantCode {
				t.Fatalf("want SQLSTATE %s, got %v", tc.wantCode, err)
			}
		})
	}
}

func TestNothingBeforeAuthentication(t *testing.T) {
	// A client that sends a query instead of its password response is
	// refused and the query never reaches PostgreSQL.
	p := startProxy(t, nil, nil)
	r := dialRaw(t, p.addr, "")
	r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "scramuser", "database": "postgres"}})
	if m, err := r.fe.Receive(); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*pgproto3.AuthenticationSASL); !ok {
		t.Fatalf("want AuthenticationSASL, got %T", m)
	}
	r.send(q("CREATE TABLE must_not_exist(a int)"))
	e := r.readError()
	if e == nil || e.Code != codeProtocolViolation {
		t.Fatalf("want 08P01, got %+v", e)
	}
	c := connect(t, p.superDSN(""))
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_class WHERE relname = 'must_not_exist'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("query before auth reached PostgreSQL: %d %v", n, err)
	}
}

// testCert writes a self-signed certificate for 127.0.0.1/localhost and
// returns the cert and key paths.
func testCert(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ordo test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLS(t *testing.T) {
	certFile, keyFile := testCert(t)
	p := startProxy(t, nil, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.AllowPlaintext = certFile, keyFile, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, extra := range []string{"sslmode=require", "sslmode=verify-full sslrootcert=" + certFile} {
		// SCRAM through TLS terminated at the proxy: no channel binding.
		c := connect(t, p.dsn("scramuser", "scrampass", extra))
		if _, ok := c.PgConn().Conn().(*tls.Conn); !ok {
			t.Fatalf("%s: connection is not TLS: %T", extra, c.PgConn().Conn())
		}
		var n int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d %v", extra, n, err)
		}
	}
	// Plaintext is refused with a clear error.
	_, err := pgx.Connect(ctx, p.dsn("trustuser", "", ""))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeInvalidAuthorization {
		t.Fatalf("plaintext: want 28000, got %v", err)
	}
	// verify-full with a name the certificate does not carry fails.
	host, port, _ := net.SplitHostPort(p.addr)
	_ = host
	if _, err := pgx.Connect(ctx, "host=127.0.0.2 port="+port+" user=trustuser dbname=postgres sslmode=verify-full sslrootcert="+certFile); err == nil {
		t.Fatal("verify-full accepted a wrong host name")
	}
}

func TestTLSDiscardsEarlyBytes(t *testing.T) {
	// CVE-2021-23214: bytes sent right after SSLRequest, before the
	// handshake, must not be read as protocol messages.
	certFile, keyFile := testCert(t)
	p := startProxy(t, nil, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.AllowPlaintext = certFile, keyFile, true
	})
	r := dialRaw(t, p.addr, "")
	ssl := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	start, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}}).Encode(nil)
	query, _ := q("CREATE TABLE injected(a int)").Encode(nil)
	if err := r.writeBytes(append(append(ssl, start...), query...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := r.conn.Read(buf); err != nil || buf[0] != 'S' {
		t.Fatalf("want 'S', got %q %v", buf, err)
	}
	if !r.closed() {
		t.Fatal("connection with injected plaintext was not closed")
	}
	c := connect(t, p.dsn("trustuser", "", "sslmode=require"))
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_class WHERE relname = 'injected'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("injected query ran: %d %v", n, err)
	}
	if got := testutil.ToFloat64(p.srv.m.connsRejected.WithLabelValues("tls")); got != 1 {
		t.Errorf("tls rejections = %v", got)
	}
}

func TestGSSENCRefused(t *testing.T) {
	p := startProxy(t, nil, nil)
	r := dialRaw(t, p.addr, "")
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b[0:], 8)
	binary.BigEndian.PutUint32(b[4:], gssEncRequestCode)
	if err := r.writeBytes(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := r.conn.Read(buf); err != nil || buf[0] != 'N' {
		t.Fatalf("want 'N', got %q %v", buf, err)
	}
	r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}})
	if got := r.untilReady(); got == "" || got[:16] != "AuthenticationOk" {
		t.Fatalf("startup after GSSENC refusal: %s", got)
	}
	// gssencmode=prefer clients (pgx does not, psql does) connect the same way.
	c := connect(t, p.dsn("trustuser", "", ""))
	_ = c
}

// TestTrustIsReportedOnce: when PostgreSQL lets a relayed client in
// without asking for anything, the proxy says, once, that every client
// reaching it gets in the same way; a password login says nothing.
func TestTrustIsReportedOnce(t *testing.T) {
	var logs syncBuffer
	p := startProxy(t, nil, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	connect(t, p.dsn("scramuser", "scrampass", ""))
	if strings.Contains(logs.String(), "without asking for a password") {
		t.Fatalf("a SCRAM login was reported as trusted:\n%s", logs.String())
	}
	connect(t, p.dsn("trustuser", "", ""))
	connect(t, p.dsn("trustuser", "", ""))
	if n := strings.Count(logs.String(), "without asking for a password"); n != 1 {
		t.Fatalf("trusted logins reported %d times, want once:\n%s", n, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the sessions' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
