package wire

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// What an unauthenticated client can make the proxy hold, over real
// sockets: each limit answers with a FATAL ErrorResponse and its SQLSTATE,
// closes the connection, and leaves other sessions alone.

// TestAuthTimeout: a client that does not finish authenticating within
// StartupTimeout is told so and disconnected, at every step of startup.
// IdleTimeout is set too: the client reader used to clear the startup
// deadline when idle timeouts were configured, so a client that never
// answered PostgreSQL's password request held its connection (and a
// PostgreSQL backend) forever.
func TestAuthTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	p := startProxy(t, nil, func(c *Config) {
		c.StartupTimeout = timeout
		c.IdleTimeout = time.Minute
	})
	healthy := connect(t, p.superDSN(""))
	for _, tc := range []struct {
		name string
		send func(r *rawConn)
	}{
		{"silent", func(*rawConn) {}},
		{"half a startup packet", func(r *rawConn) {
			_ = r.writeBytes(append(be32(100), be32(pgproto3.ProtocolVersionNumber)...))
		}},
		{"after SSLRequest", func(r *rawConn) {
			_ = r.writeBytes(append(be32(8), be32(sslRequestCode)...))
			b := make([]byte, 1)
			if _, err := r.conn.Read(b); err != nil || b[0] != 'N' {
				r.t.Fatalf("SSLRequest: %q %v", b, err)
			}
		}},
		{"password never sent", func(r *rawConn) {
			r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
				Parameters: map[string]string{"user": "md5user", "database": "postgres"}})
			m, err := r.fe.Receive()
			if _, ok := m.(*pgproto3.AuthenticationMD5Password); !ok || err != nil {
				r.t.Fatalf("want AuthenticationMD5Password, got %T %v", m, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, p.addr, "")
			start := time.Now()
			tc.send(r)
			e := r.readError()
			if e == nil || e.Code != codeQueryCanceled || e.Severity != "FATAL" {
				t.Fatalf("want FATAL 57014, got %+v", e)
			}
			if !r.closed() {
				t.Fatal("connection not closed")
			}
			if d := time.Since(start); d > timeout+2*time.Second {
				t.Fatalf("closed after %v, timeout %v", d, timeout)
			}
			var n int
			if err := healthy.QueryRow(context.Background(), "SELECT 1").Scan(&n); err != nil {
				t.Fatalf("other session broken: %v", err)
			}
		})
	}
	// An established session is not bound by the startup deadline.
	time.Sleep(timeout)
	var n int
	if err := healthy.QueryRow(context.Background(), "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(p.srv.m.connsRejected.WithLabelValues("auth_timeout")); got != 4 {
		t.Errorf("auth_timeout rejections = %v, want 4", got)
	}
	waitFor(t, func() bool { return testutil.ToFloat64(p.srv.m.unauthed) == 0 })
}

// TestUnauthenticatedLimits: connections not yet authenticated are
// limited per source address and in all; authenticated sessions do not
// count; a slot frees when its connection authenticates or leaves.
func TestUnauthenticatedLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		total, from int
		reason      string
	}{
		{"per source", 10, 3, "source_limit"},
		{"in all", 3, 10, "startup_limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, nil, func(c *Config) {
				c.MaxStartupConns, c.MaxStartupConnsPerSource = tc.total, tc.from
			})
			// Authenticated sessions beyond the limit are fine.
			for range 5 {
				connect(t, p.dsn("trustuser", "", ""))
			}
			var idle []*rawConn
			for range 3 {
				idle = append(idle, dialRaw(t, p.addr, ""))
			}
			waitFor(t, func() bool { return testutil.ToFloat64(p.srv.m.unauthed) == 3 })
			r := dialRaw(t, p.addr, "")
			e := r.readError()
			if e == nil || e.Code != codeTooManyConnections || e.Severity != "FATAL" {
				t.Fatalf("want FATAL 53300, got %+v", e)
			}
			t.Logf("refused: %s", e.Message)
			if !r.closed() {
				t.Fatal("connection not closed")
			}
			if got := testutil.ToFloat64(p.srv.m.connsRejected.WithLabelValues(tc.reason)); got != 1 {
				t.Errorf("%s rejections = %v, want 1", tc.reason, got)
			}
			// One of them authenticates: its slot is free again.
			idle[0].send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
				Parameters: map[string]string{"user": "trustuser", "database": "postgres"}})
			if got := idle[0].untilReady(); got == "" {
				t.Fatal("no startup reply")
			}
			waitFor(t, func() bool { return testutil.ToFloat64(p.srv.m.unauthed) == 2 })
			// One leaves: another slot.
			idle[1].conn.Close()
			waitFor(t, func() bool { return testutil.ToFloat64(p.srv.m.unauthed) == 1 })
			connect(t, p.dsn("trustuser", "", ""))
			dialRaw(t, p.addr, "")
			dialRaw(t, p.addr, "")
			waitFor(t, func() bool { return testutil.ToFloat64(p.srv.m.unauthed) == 3 })
		})
	}
}

// TestNegotiationLimits: each of SSLRequest and GSSENCRequest is answered
// once; the startup packet and the messages before authentication are
// bounded.
func TestNegotiationLimits(t *testing.T) {
	p := startProxy(t, nil, func(c *Config) { c.MaxStartupPacketLen = 2000 })
	ssl, gss := append(be32(8), be32(sslRequestCode)...), append(be32(8), be32(gssEncRequestCode)...)
	bigParams := append(be32(3008), be32(pgproto3.ProtocolVersionNumber)...)
	bigParams = append(bigParams, make([]byte, 3000)...)
	for _, tc := range []struct {
		name    string
		bytes   []byte
		replies int // single-byte replies ('N') before the error
	}{
		{"SSLRequest twice", append(append([]byte{}, ssl...), ssl...), 1},
		{"GSSENCRequest twice", append(append([]byte{}, gss...), gss...), 1},
		{"GSS, SSL, GSS", append(append(append([]byte{}, gss...), ssl...), gss...), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, p.addr, "")
			if err := r.writeBytes(tc.bytes); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, tc.replies)
			if _, err := readFull(r.conn, b); err != nil {
				t.Fatal(err)
			}
			for _, c := range b {
				if c != 'N' {
					t.Fatalf("replies %q", b)
				}
			}
			e := r.readError()
			if e == nil || e.Code != codeProtocolViolation || e.Severity != "FATAL" {
				t.Fatalf("want FATAL 08P01, got %+v", e)
			}
			if !r.closed() {
				t.Fatal("connection not closed")
			}
		})
	}
	// A startup packet over the limit is closed without a word, as
	// PostgreSQL closes one over its own limit.
	big := dialRaw(t, p.addr, "")
	if err := big.writeBytes(bigParams); err != nil {
		t.Fatal(err)
	}
	if got, closed := big.silence(); len(got) > 0 || !closed {
		t.Fatalf("startup packet over the limit: got %q (closed %v)", got, closed)
	}
	// GSS refused, then SSL refused, then a startup packet: a session.
	r := dialRaw(t, p.addr, "")
	_ = r.writeBytes(append(append([]byte{}, gss...), ssl...))
	b := make([]byte, 2)
	if _, err := readFull(r.conn, b); err != nil || string(b) != "NN" {
		t.Fatalf("negotiation replies %q %v", b, err)
	}
	r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}})
	if got := r.untilReady(); !strings.Contains(got, "ReadyForQuery") {
		t.Fatalf("no session: %s", got)
	}

	// A password message larger than PostgreSQL's limit for one is refused
	// before it is read whole.
	r = dialRaw(t, p.addr, "")
	r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "md5user", "database": "postgres"}})
	if m, err := r.fe.Receive(); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*pgproto3.AuthenticationMD5Password); !ok {
		t.Fatalf("want AuthenticationMD5Password, got %T", m)
	}
	_ = r.writeBytes(msg('p', 1<<20, []byte("md5")))
	e := r.readError()
	if e == nil || e.Code != codeProtocolViolation || e.Severity != "FATAL" {
		t.Fatalf("want FATAL 08P01, got %+v", e)
	}
	if !r.closed() {
		t.Fatal("connection not closed")
	}
	c := connect(t, p.dsn("md5user", "md5pass", ""))
	var n int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
