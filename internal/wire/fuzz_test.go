package wire

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FuzzClientMessages sends arbitrary bytes to the proxy, either right after
// a successful startup (first byte even) or instead of a startup packet
// (first byte odd). Invariants: whatever PostgreSQL and the proxy answer is
// well-formed protocol, the connection ends or answers within a bounded
// time, the proxy never panics (it would recover, and log it), and it
// keeps serving new sessions.
func FuzzClientMessages(f *testing.F) {
	enc := func(msgs ...pgproto3.FrontendMessage) []byte {
		var b []byte
		for _, m := range msgs {
			b, _ = m.Encode(b)
		}
		return b
	}
	startup := enc(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}})
	after := func(b []byte) []byte { return append([]byte{0}, b...) }
	before := func(b []byte) []byte { return append([]byte{1}, b...) }
	f.Add(after(enc(q("SELECT 1"))))
	f.Add(after(enc(q("SELECT 1; SELECT 'a'"), &pgproto3.Terminate{})))
	f.Add(after(enc(&pgproto3.Parse{Query: "SELECT $1::int"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{MaxRows: 1}, &pgproto3.Sync{})))
	f.Add(after(enc(q("CREATE TEMP TABLE f(a int)"), q("COPY f FROM STDIN"), &pgproto3.CopyData{Data: []byte("1\n")}, &pgproto3.CopyDone{})))
	f.Add(after(enc(q("COPY (SELECT 1) TO STDOUT"), &pgproto3.CopyFail{Message: "x"}, &pgproto3.Flush{})))
	f.Add(after(msg('Q', 1<<31, nil)))
	f.Add(after(msg('Q', 3, nil)))
	f.Add(after(msg('B', 6, []byte("\x00\x00"))))
	f.Add(after(startup))
	f.Add(after([]byte("garbage")))
	f.Add(before(startup))
	f.Add(before([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}))
	f.Add(before([]byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2}))
	f.Add(before([]byte("GET / HTTP/1.1\r\n\r\n")))

	var logs syncLog
	p := startProxy(f, nil, func(c *Config) {
		c.StartupTimeout = 2 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		fe := pgproto3.NewFrontend(c, c)
		if data[0]&1 == 0 {
			// statement_timeout bounds whatever the input asks PostgreSQL to do.
			fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
				Parameters: map[string]string{"user": "trustuser", "database": "postgres", "options": "-c statement_timeout=500"}})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := fe.Receive()
				if err != nil {
					t.Fatalf("startup: %v", err)
				}
				if _, ok := m.(*pgproto3.ReadyForQuery); ok {
					break
				}
			}
		}
		if _, err := c.Write(data[1:]); err != nil {
			return // the proxy may already have closed on bad input
		}
		_ = c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
		for {
			_, err := fe.Receive()
			if err == nil {
				continue
			}
			var ne net.Error
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) {
				break
			}
			// Raw startup-phase replies ('S', 'N') are single bytes,
			// not messages; only judge sessions that started.
			if data[0]&1 == 0 {
				t.Fatalf("malformed reply from the proxy: %v", err)
			}
			break
		}
		c.Close()

		// The proxy still serves.
		r := dialRaw(t, p.addr, "trustuser")
		r.send(q("SELECT 42"))
		if got := r.untilReady(); got != "RowDescription ?column?:23\nDataRow \"42\"\nCommandComplete SELECT 1\nReadyForQuery I\n" {
			t.Fatalf("proxy broken after input: %s", got)
		}
		if l := logs.take(); strings.Contains(l, "panic") {
			t.Fatalf("the proxy panicked: %s", l)
		}
	})
}
