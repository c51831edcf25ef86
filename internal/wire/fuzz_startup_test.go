package wire

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeBackend is a PostgreSQL stand-in for the startup path: it
// authenticates by the user name (trust, clear, md5, scram: the messages
// PostgreSQL sends for each, password "secret" or any SASL exchange) and
// then waits for the client to leave. It records a violation if any
// message reaches it before authentication that is not the response it
// asked for: the proxy must never pass a client's messages to PostgreSQL
// before PostgreSQL has authenticated the client.
type fakeBackend struct {
	ln         net.Listener
	mu         sync.Mutex
	violations []string
	wg         sync.WaitGroup
}

func startFakeBackend(t testing.TB) *fakeBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{ln: ln}
	fb.wg.Add(1)
	go func() {
		defer fb.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fb.wg.Add(1)
			go func() {
				defer fb.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				fb.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); fb.wg.Wait() })
	return fb
}

func (fb *fakeBackend) violation(format string, args ...any) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.violations = append(fb.violations, fmt.Sprintf(format, args...))
}

func (fb *fakeBackend) takeViolations() []string {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	v := fb.violations
	fb.violations = nil
	return v
}

func (fb *fakeBackend) serve(c net.Conn) {
	be := pgproto3.NewBackend(c, c)
	sm, err := be.ReceiveStartupMessage()
	if err != nil {
		fb.violation("the proxy sent an invalid startup packet: %v", err)
		return
	}
	start, ok := sm.(*pgproto3.StartupMessage)
	if !ok {
		return // a CancelRequest
	}
	send := func(ms ...pgproto3.BackendMessage) bool {
		for _, m := range ms {
			be.Send(m)
		}
		return be.Flush() == nil
	}
	// expect asks for one client response of type typ and returns it.
	expect := func(ask pgproto3.BackendMessage, typ uint32) pgproto3.FrontendMessage {
		if !send(ask) || be.SetAuthType(typ) != nil {
			return nil
		}
		m, err := be.Receive()
		if err != nil {
			return nil
		}
		switch m.(type) {
		case *pgproto3.PasswordMessage, *pgproto3.SASLInitialResponse, *pgproto3.SASLResponse:
		default:
			fb.violation("a %T reached PostgreSQL before authentication", m)
			return nil
		}
		return m
	}
	bad := &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "28P01", Message: "password authentication failed"}
	switch start.Parameters["user"] {
	case "trust":
	case "clear":
		m := expect(&pgproto3.AuthenticationCleartextPassword{}, pgproto3.AuthTypeCleartextPassword)
		if pm, ok := m.(*pgproto3.PasswordMessage); !ok || pm.Password != "secret" {
			send(bad)
			return
		}
	case "md5":
		if expect(&pgproto3.AuthenticationMD5Password{Salt: [4]byte{1, 2, 3, 4}}, pgproto3.AuthTypeMD5Password) == nil {
			send(bad)
			return
		}
	case "scram":
		if expect(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256", "SCRAM-SHA-256-PLUS"}}, pgproto3.AuthTypeSASL) == nil ||
			expect(&pgproto3.AuthenticationSASLContinue{Data: []byte("r=abc,s=c2FsdA==,i=4096")}, pgproto3.AuthTypeSASLContinue) == nil {
			send(bad)
			return
		}
		if !send(&pgproto3.AuthenticationSASLFinal{Data: []byte("v=x")}) {
			return
		}
	default:
		send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "28000", Message: "no such role"})
		return
	}
	_ = be.SetAuthType(pgproto3.AuthTypeOk)
	if !send(&pgproto3.AuthenticationOk{}, &pgproto3.ParameterStatus{Name: "server_version", Value: "18"},
		&pgproto3.BackendKeyData{ProcessID: 7, SecretKey: []byte{0, 0, 0, 8}}, &pgproto3.ReadyForQuery{TxStatus: 'I'}) {
		return
	}
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		switch m.(type) {
		case *pgproto3.Terminate:
			return
		case *pgproto3.Query, *pgproto3.Sync:
			send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		}
	}
}

// startupBytes encodes frontend messages for seeds.
func startupBytes(ms ...pgproto3.FrontendMessage) []byte {
	var b []byte
	for _, m := range ms {
		b, _ = m.Encode(b)
	}
	return b
}

func startupAs(user string) *pgproto3.StartupMessage {
	return &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": user, "database": "db"}}
}

// FuzzStartup sends arbitrary bytes as a new client's first bytes (then
// closes its sending side) to a proxy with TLS and plaintext, in front of
// a fake PostgreSQL that authenticates by user name: the startup packet,
// SSLRequest and GSSENCRequest negotiation (and a TLS handshake fed with
// the input's bytes), CancelRequest, protocol versions, and the
// authentication exchange (cleartext, MD5, SASL). Invariants: the proxy
// never panics and closes the connection once the client is done; nothing
// but the requested authentication responses reaches PostgreSQL before it
// authenticated the client; no connection stays counted as
// unauthenticated; and the proxy keeps serving new clients.
func FuzzStartup(f *testing.F) {
	ssl := append(be32(8), be32(sslRequestCode)...)
	gss := append(be32(8), be32(gssEncRequestCode)...)
	cancel := append(be32(16), append(be32(cancelRequestCode), append(be32(7), be32(8)...)...)...)
	pw := func(s string) []byte { return startupBytes(&pgproto3.PasswordMessage{Password: s}) }
	for _, seed := range [][]byte{
		startupBytes(startupAs("trust"), &pgproto3.Query{String: "SELECT 1"}, &pgproto3.Terminate{}),
		append(startupBytes(startupAs("clear")), pw("secret")...),
		append(startupBytes(startupAs("clear")), pw("wrong")...),
		append(startupBytes(startupAs("md5")), pw("md5abcdef")...),
		append(startupBytes(startupAs("md5")), startupBytes(&pgproto3.Query{String: "SELECT 1"})...),
		append(startupBytes(startupAs("scram")), startupBytes(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=abc")},
			&pgproto3.SASLResponse{Data: []byte("c=biws,r=abc,p=xyz")})...),
		append(startupBytes(startupAs("clear")), msg('p', 1<<20, []byte("x"))...),
		startupBytes(startupAs("nobody")),
		append(append([]byte{}, ssl...), startupBytes(startupAs("trust"))...),
		append(append([]byte{}, ssl...), []byte("\x16\x03\x01\x00\x05hello")...),
		append(append(append([]byte{}, gss...), gss...), startupBytes(startupAs("trust"))...),
		append(append([]byte{}, gss...), ssl...),
		cancel,
		append(be32(8), be32(3<<16|2)...),
		startupBytes(&pgproto3.StartupMessage{ProtocolVersion: 3<<16 | 2, Parameters: map[string]string{"user": "trust", "_pq_.x": "1"}}),
		append(be32(20000), be32(pgproto3.ProtocolVersionNumber)...),
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		f.Add(seed)
	}

	fb := startFakeBackend(f)
	certFile, keyFile := testCert(f)
	var logs syncLog
	p := startProxy(f, nil, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		c.BackendAddr = fb.ln.Addr().String()
		c.TLSCertFile, c.TLSKeyFile, c.AllowPlaintext = certFile, keyFile, true
		c.StartupTimeout = 3 * time.Second
		c.IdleTimeout = time.Minute
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(data); err == nil {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		// The proxy answers and closes: within the startup timeout at
		// the latest.
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the proxy kept the connection open after the client was done")
			}
		}
		if v := fb.takeViolations(); len(v) > 0 {
			t.Fatalf("reached PostgreSQL: %v", v)
		}
		waitFor(t, func() bool { return testutil.ToFloat64(p.srv.m.unauthed) == 0 })

		// A well-behaved client still gets in.
		h, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		_ = h.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := h.Write(append(startupBytes(startupAs("clear")), pw("secret")...)); err != nil {
			t.Fatal(err)
		}
		fe := pgproto3.NewFrontend(h, h)
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatalf("a well-behaved client after the input: %v", err)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		_, _ = h.Write(startupBytes(&pgproto3.Terminate{}))
		// Checked last: a panic is logged once the panicking session's
		// own cleanup has closed the input's connection.
		if l := logs.take(); strings.Contains(l, "panic") {
			t.Fatalf("the proxy panicked: %s", l)
		}
	})
}

// syncLog collects log output across goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}
