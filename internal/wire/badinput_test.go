package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// msg builds a typed message with an explicit (possibly lying) length.
func msg(typ byte, length uint32, body []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], length)
	return append(b, body...)
}

func be32(v uint32) []byte { b := make([]byte, 4); binary.BigEndian.PutUint32(b, v); return b }

func TestBadInputAfterStartup(t *testing.T) {
	p := startProxy(t, nil, nil)
	healthy := connect(t, p.superDSN(""))
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}}).Encode(nil)
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"length below 4", msg('Q', 3, nil)},
		{"length 2^31", msg('Q', 1<<31, []byte("SELECT 1"))},
		{"length 2^31-1", msg('Q', 1<<31-1, []byte("SELECT 1"))},
		{"length 2^32-1", msg('Q', 1<<32-1, []byte("SELECT 1"))},
		// A 4 GiB + 9 byte Query whose length wrapped to 9 (CVE-2024-27304
		// shape): the proxy reads a 9-byte message and then the "rest" as
		// the next message, exactly as PostgreSQL would; here that rest has
		// an unknown type and is refused rather than smuggled.
		{"wrapped length", append(msg('Q', 9, []byte("abcd\x00")), msg('\xff', 8, []byte("junk"))...)},
		{"unknown type", msg('z', 4, nil)},
		{"second StartupMessage", startup},
		{"password after startup", msg('p', 9, []byte("pass\x00"))},
		{"unterminated query", msg('Q', 8, []byte("abcd"))},
		// pgproto3 panics decoding it (found by FuzzStartup).
		{"empty query body", msg('Q', 4, nil)},
		{"truncated bind", msg('B', 6, []byte("\x00\x00"))},
		{"garbage", []byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09garbage")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, p.addr, "trustuser")
			if err := r.writeBytes(tc.bytes); err != nil {
				t.Fatal(err)
			}
			e := r.readError()
			if e == nil || e.Code != codeProtocolViolation || e.Severity != "FATAL" {
				t.Fatalf("want FATAL 08P01, got %+v", e)
			}
			if !r.closed() {
				t.Fatal("connection not closed after protocol violation")
			}
			var n int
			if err := healthy.QueryRow(context.Background(), "SELECT 1").Scan(&n); err != nil {
				t.Fatalf("other session broken: %v", err)
			}
		})
	}
	// A client that disconnects in the middle of a message costs nothing.
	r := dialRaw(t, p.addr, "trustuser")
	_ = r.writeBytes(msg('Q', 100, []byte("SELECT")))
	r.conn.Close()
	waitFor(t, func() bool { return len(p.srv.sessionsSnapshot()) == 1 })
}

func TestBadInputBeforeStartup(t *testing.T) {
	p := startProxy(t, nil, nil)
	for _, tc := range []struct {
		name  string
		bytes []byte
		code  string
	}{
		// An invalid length: closed without a word, as PostgreSQL does.
		{"http request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ""},
		{"length 2^31", append(be32(1<<31), be32(pgproto3.ProtocolVersionNumber)...), ""},
		{"length 7", append(be32(7), be32(pgproto3.ProtocolVersionNumber)...), ""},
		{"Terminate before the startup packet", []byte{'X', 0, 0, 0, 4, 0, 0, 0, 8}, ""},
		{"protocol 2.0", append(be32(16), append(be32(2<<16), []byte("user\x00x\x00\x00\x00")...)...), codeFeatureNotSupported},
		{"unknown code", append(be32(8), be32(1234)...), codeFeatureNotSupported},
		{"no user", append(be32(20), append(be32(pgproto3.ProtocolVersionNumber), []byte("database\x00x\x00\x00")...)...), codeInvalidAuthorization},
		{"unterminated parameters", append(be32(12), append(be32(pgproto3.ProtocolVersionNumber), []byte("user")...)...), codeProtocolViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, p.addr, "")
			if err := r.writeBytes(tc.bytes); err != nil {
				t.Fatal(err)
			}
			if tc.code == "" {
				if got, closed := r.silence(); len(got) > 0 || !closed {
					t.Fatalf("want the connection closed without a word, got %q (closed %v)", got, closed)
				}
				return
			}
			e := r.readError()
			if e == nil || e.Code != tc.code {
				t.Fatalf("want %s, got %+v", tc.code, e)
			}
			if !r.closed() {
				t.Fatal("connection not closed")
			}
		})
	}
	// Truncated startup packet, then silence: the startup timeout applies,
	// and a close frees everything.
	r := dialRaw(t, p.addr, "")
	_ = r.writeBytes(append(be32(100), be32(pgproto3.ProtocolVersionNumber)...))
	r.conn.Close()
	c := connect(t, p.dsn("trustuser", "", ""))
	var n int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
}

func TestMaxMessageLen(t *testing.T) {
	p := startProxy(t, nil, func(c *Config) { c.MaxMessageLen = 1 << 20 })
	c := connect(t, p.superDSN(""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := make([]byte, 2<<20)
	for i := range big {
		big[i] = 'a'
	}
	if _, err := c.Exec(ctx, "SELECT length($1::text)", string(big)); err == nil {
		t.Fatal("message over MaxMessageLen accepted")
	}
	c2 := connect(t, p.superDSN(""))
	var n int
	if err := c2.QueryRow(ctx, "SELECT length($1::text)", string(big[:1<<19])).Scan(&n); err != nil || n != 1<<19 {
		t.Fatalf("message under the limit: %d %v", n, err)
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReceiveMalformed: messages pgproto3 panicked on when it decoded them
// (v5.7.2; found by FuzzStartup) are protocol errors, whether the library
// panics (receive recovers: errMalformed) or refuses them.
func TestReceiveMalformed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		authType uint32
		bytes    []byte
	}{
		{"empty Query", pgproto3.AuthTypeOk, msg('Q', 4, nil)},
		{"SASLInitialResponse without its length", pgproto3.AuthTypeSASL, msg('p', 18, []byte("SCRAM-SHA-256\x00"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := pgproto3.NewBackend(bytes.NewReader(tc.bytes), io.Discard)
			if err := be.SetAuthType(tc.authType); err != nil {
				t.Fatal(err)
			}
			m, err := receive(be)
			if err == nil || !isProtocolError(err) {
				t.Fatalf("got %T %v, want a protocol error", m, err)
			}
		})
	}
}
