package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// step is one exchange of a wire script: messages to send, then read until
// `ready` ReadyForQuery messages, or exactly `n` messages if n > 0.
type step struct {
	send  []pgproto3.FrontendMessage
	ready int
	n     int
}

// runScript runs steps on a fresh trust session at addr and returns the
// transcript.
func runScript(t *testing.T, addr string, steps []step) string {
	t.Helper()
	r := dialRaw(t, addr, "trustuser")
	var sb strings.Builder
	for _, s := range steps {
		if len(s.send) > 0 {
			r.send(s.send...)
		}
		if s.n > 0 {
			sb.WriteString(r.receiveN(s.n))
		}
		for i := 0; i < s.ready; i++ {
			sb.WriteString(r.untilReady())
		}
	}
	return sb.String()
}

// compareScript runs steps directly against PostgreSQL and through the
// proxy, requires identical transcripts, and requires each of want in the
// transcript (so both sides cannot be wrong in the same way unnoticed).
func compareScript(t *testing.T, p *proxy, steps []step, want ...string) {
	t.Helper()
	direct := runScript(t, pg.Addr(), steps)
	proxied := runScript(t, p.addr, steps)
	if direct != proxied {
		t.Fatalf("transcripts differ\n--- direct\n%s--- proxied\n%s", direct, proxied)
	}
	for _, w := range want {
		if !strings.Contains(proxied, w) {
			t.Errorf("transcript lacks %q:\n%s", w, proxied)
		}
	}
}

func q(s string) *pgproto3.Query { return &pgproto3.Query{String: s} }

func TestScriptSimpleQuery(t *testing.T) {
	p := startProxy(t, nil, nil)
	compareScript(t, p, []step{
		{send: []pgproto3.FrontendMessage{q(`CREATE TEMP TABLE t(a int, b text); INSERT INTO t VALUES (1,'x'),(2,NULL); SELECT * FROM t ORDER BY a`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`BEGIN; SELECT 1/0; SELECT 2`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`SELECT 3`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`ROLLBACK`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(``)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`DO $$BEGIN RAISE NOTICE 'hello %', 42; END$$`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`SET application_name = 'scripted'`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`SELECT 1; SELECT 2`), q(`SELECT 3`)}, ready: 2}, // pipelined simple queries
	},
		`DataRow "1","x"`, `DataRow "2",NULL`, "CommandComplete INSERT 0 2",
		"ErrorResponse ERROR 22012 division by zero\nReadyForQuery E",
		"ErrorResponse ERROR 25P02", "ReadyForQuery I", "EmptyQueryResponse",
		"NoticeResponse NOTICE 00000 hello 42", "ParameterStatus application_name=scripted",
		"DataRow \"3\"\nCommandComplete SELECT 1\nReadyForQuery I")
}

func TestScriptExtendedQuery(t *testing.T) {
	p := startProxy(t, nil, nil)
	compareScript(t, p, []step{
		// Pipelined: named and unnamed statements and portals, row limits
		// (PortalSuspended), Describe, Close, one Sync.
		{send: []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "s1", Query: "SELECT $1::int * 2 AS doubled"},
			&pgproto3.Parse{Query: "SELECT generate_series(1, $1::int) AS g"},
			&pgproto3.Describe{ObjectType: 'S', Name: "s1"},
			&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "s1", Parameters: [][]byte{[]byte("21")}},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("5")}},
			&pgproto3.Describe{ObjectType: 'P', Name: "p1"},
			&pgproto3.Execute{Portal: "p1"},
			&pgproto3.Execute{MaxRows: 2},
			&pgproto3.Execute{MaxRows: 2},
			&pgproto3.Execute{},
			&pgproto3.Close{ObjectType: 'P', Name: "p1"},
			&pgproto3.Close{ObjectType: 'S', Name: "s1"},
			&pgproto3.Sync{},
		}, ready: 1},
		// Flush without Sync: replies must arrive before the Sync.
		{send: []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "s2", Query: "SELECT 'flushed'"},
			&pgproto3.Bind{PreparedStatement: "s2"},
			&pgproto3.Execute{MaxRows: 1},
			&pgproto3.Flush{},
		}, n: 4},
		{send: []pgproto3.FrontendMessage{&pgproto3.Sync{}}, ready: 1},
		// An error skips to Sync.
		{send: []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELEC 1"},
			&pgproto3.Bind{},
			&pgproto3.Execute{},
			&pgproto3.Sync{},
			&pgproto3.Parse{Query: "SELECT 'after'"},
			&pgproto3.Bind{},
			&pgproto3.Execute{},
			&pgproto3.Sync{},
		}, ready: 2},
	},
		"ParameterDescription\nRowDescription doubled:23", `DataRow "42"`,
		"DataRow \"1\"\nDataRow \"2\"\nPortalSuspended\nDataRow \"3\"\nDataRow \"4\"\nPortalSuspended\nDataRow \"5\"\nCommandComplete SELECT 1",
		"CloseComplete\nCloseComplete\nReadyForQuery I",
		"ParseComplete\nBindComplete\nDataRow \"flushed\"\nPortalSuspended\nReadyForQuery I",
		"ErrorResponse ERROR 42601", `DataRow "after"`)
}

func TestScriptCopy(t *testing.T) {
	p := startProxy(t, nil, nil)
	compareScript(t, p, []step{
		{send: []pgproto3.FrontendMessage{q(`CREATE TEMP TABLE c(a int, b text)`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`COPY c FROM STDIN`)}, n: 1},
		{send: []pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("1\tone\n2\t")}, &pgproto3.CopyData{Data: []byte("two\n")}, &pgproto3.CopyDone{}}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`COPY c TO STDOUT`)}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`COPY c FROM STDIN`)}, n: 1},
		{send: []pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("3\tthree\n")}, &pgproto3.CopyFail{Message: "client gave up"}}, ready: 1},
		// COPY through the extended protocol: the Sync sent with the
		// Execute is ignored in copy mode, the one after CopyDone counts.
		{send: []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "COPY c FROM STDIN"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
		}, n: 3},
		{send: []pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("4\tfour\n")}, &pgproto3.CopyDone{}, &pgproto3.Sync{}}, ready: 1},
		{send: []pgproto3.FrontendMessage{q(`SELECT count(*) FROM c`)}, ready: 1},
	},
		"CopyInResponse", "CommandComplete COPY 2", `CopyData "1\tone\n"`, "CopyOutResponse",
		"ErrorResponse ERROR 57014 COPY from stdin failed: client gave up", "CommandComplete COPY 1",
		`DataRow "3"`)
}

func TestPgxModes(t *testing.T) {
	p := startProxy(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		c := connect(t, p.superDSN("default_query_exec_mode="+mode))
		var sum int64
		var txt string
		for i := 0; i < 3; i++ { // repeat so cached statements are reused
			if err := c.QueryRow(ctx, "SELECT sum(g), $2::text FROM generate_series(1, $1::int) g", 100, "x'y").Scan(&sum, &txt); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
		}
		if sum != 5050 || txt != "x'y" {
			t.Fatalf("%v: got %d %q", mode, sum, txt)
		}
		// Batch: pipelined statements in one round trip.
		if _, err := c.Exec(ctx, "CREATE TEMP TABLE bt(a int)"); err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue("TRUNCATE bt")
		for i := 0; i < 10; i++ {
			b.Queue("INSERT INTO bt VALUES ($1)", i)
		}
		b.Queue("SELECT count(*), sum(a) FROM bt")
		br := c.SendBatch(ctx, b)
		for i := 0; i < 11; i++ {
			if _, err := br.Exec(); err != nil {
				t.Fatalf("%v: batch exec %d: %v", mode, i, err)
			}
		}
		var n, s int
		if err := br.QueryRow().Scan(&n, &s); err != nil || n != 10 || s != 45 {
			t.Fatalf("%v: batch result %d %d %v", mode, n, s, err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCopyLarge(t *testing.T) {
	p := startProxy(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := connect(t, p.superDSN(""))
	if _, err := c.Exec(ctx, "CREATE TEMP TABLE big(a int, b text)"); err != nil {
		t.Fatal(err)
	}
	const rows = 200000
	n, err := c.CopyFrom(ctx, pgx.Identifier{"big"}, []string{"a", "b"}, pgx.CopyFromSlice(rows, func(i int) ([]any, error) {
		return []any{i, strings.Repeat("z", 100)}, nil
	}))
	if err != nil || n != rows {
		t.Fatalf("CopyFrom: %d %v", n, err)
	}
	var w countWriter
	tag, err := c.PgConn().CopyTo(ctx, &w, "COPY big TO STDOUT")
	if err != nil || tag.RowsAffected() != rows || w.lines != rows {
		t.Fatalf("CopyTo: %v %v lines=%d", tag, err, w.lines)
	}
}

type countWriter struct{ lines int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.lines += strings.Count(string(p), "\n")
	return len(p), nil
}

func TestListenNotify(t *testing.T) {
	p := startProxy(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := connect(t, p.superDSN(""))
	s := connect(t, p.superDSN(""))
	if _, err := l.Exec(ctx, "LISTEN ordo_chan"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, "SELECT pg_notify('ordo_chan', 'payload 1')"); err != nil {
		t.Fatal(err)
	}
	// The listener is idle: the notification must be relayed without any
	// client activity.
	n, err := l.WaitForNotification(ctx)
	if err != nil || n.Channel != "ordo_chan" || n.Payload != "payload 1" {
		t.Fatalf("notification %+v %v", n, err)
	}
}

func TestCancel(t *testing.T) {
	p := startProxy(t, nil, nil)
	c := connect(t, p.superDSN(""))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Exec(ctx, "SELECT pg_sleep(20)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" {
		// pgx may close the connection on context cancel; what matters is
		// that PostgreSQL got the cancel, checked by the elapsed time.
		if time.Since(start) > 5*time.Second {
			t.Fatalf("query was not canceled: %v after %v", err, time.Since(start))
		}
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("cancel took %v", time.Since(start))
	}

	// Cancel through pgconn explicitly: the running statement stops.
	c2 := connect(t, p.superDSN(""))
	done := make(chan error, 1)
	go func() {
		_, err := c2.Exec(context.Background(), "SELECT pg_sleep(20)")
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := c2.PgConn().CancelRequest(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.As(err, &pe) || pe.Code != "57014" {
			t.Fatalf("want 57014 query_canceled, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CancelRequest did not cancel the query")
	}

	// A cancel with an unknown key does nothing.
	go func() {
		_, err := c2.Exec(context.Background(), "SELECT pg_sleep(0.5)")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	r := dialRaw(t, p.addr, "")
	r.send(&pgproto3.CancelRequest{ProcessID: 12345, SecretKey: []byte{0, 0, 2, 166}})
	if !r.closed() {
		t.Fatal("proxy kept a cancel connection open")
	}
	if err := <-done; err != nil {
		t.Fatalf("unknown-key cancel affected a session: %v", err)
	}

	// Nor does one whose secret is longer (protocol 3.2's) than the four
	// bytes Ordo gives, even when it begins with them.
	go func() {
		_, err := c2.Exec(context.Background(), "SELECT pg_sleep(0.5)")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	r = dialRaw(t, p.addr, "")
	r.send(&pgproto3.CancelRequest{ProcessID: c2.PgConn().PID(), SecretKey: append(c2.PgConn().SecretKey(), make([]byte, 28)...)})
	if !r.closed() {
		t.Fatal("proxy kept a cancel connection open")
	}
	if err := <-done; err != nil {
		t.Fatalf("a cancel with a long secret affected a session: %v", err)
	}
}

func TestStartupParameters(t *testing.T) {
	p := startProxy(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := connect(t, p.superDSN("application_name=ordo_test options='-c search_path=foo,public -c extra_float_digits=3'"))
	if got := c.PgConn().ParameterStatus("application_name"); got != "ordo_test" {
		t.Errorf("application_name = %q", got)
	}
	var sp, efd string
	if err := c.QueryRow(ctx, "SELECT current_setting('search_path'), current_setting('extra_float_digits')").Scan(&sp, &efd); err != nil {
		t.Fatal(err)
	}
	if sp != "foo,public" || efd != "3" {
		t.Errorf("search_path %q extra_float_digits %q", sp, efd)
	}
	if _, err := c.Exec(ctx, "SET application_name = 'changed'"); err != nil {
		t.Fatal(err)
	}
	if got := c.PgConn().ParameterStatus("application_name"); got != "changed" {
		t.Errorf("ParameterStatus not relayed: application_name = %q", got)
	}
	// The client knows its backend's pid (pg_terminate_backend, logs and
	// pg_stat_activity find it); the secret is the proxy's, so cancel
	// requests come to the proxy (TestCancel).
	var backendPID uint32
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backendPID); err != nil {
		t.Fatal(err)
	}
	if c.PgConn().PID() != backendPID {
		t.Errorf("client got pid %d, its backend is %d", c.PgConn().PID(), backendPID)
	}
}

func TestNegotiateProtocolVersion(t *testing.T) {
	p := startProxy(t, nil, nil)
	r := dialRaw(t, p.addr, "")
	r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres", "_pq_.future": "1"}})
	// pgproto3 cannot decode 'v'; check the raw bytes of the first message:
	// the newest version spoken, 3.0 as PostgreSQL encodes it (major<<16 |
	// minor: pgjdbc refused "0.0"), and the options not recognised.
	want := []byte{'v', 0, 0, 0, 24, 0, 3, 0, 0, 0, 0, 0, 1}
	want = append(append(want, "_pq_.future"...), 0)
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(r.conn, buf); err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("want NegotiateProtocolVersion %q first, got %q %v", want, buf, err)
	}
	buf = buf[:1]
	// A 3.1 startup packet is negotiated down the same way.
	r2 := dialRaw(t, p.addr, "")
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "trustuser", "database": "postgres"}}).Encode(nil)
	b[7] = 1 // minor version 1
	if err := r2.writeBytes(b); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.conn.Read(buf); err != nil || buf[0] != 'v' {
		t.Fatalf("3.1: want NegotiateProtocolVersion first, got %q %v", buf, err)
	}
}

func TestStreamingBoundedMemory(t *testing.T) {
	// ~110 MB of COPY data and of result rows pass through; the heap (proxy
	// and the streaming test client together) must stay far below that.
	p := startProxy(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := connect(t, p.superDSN(""))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	var w countWriter
	tag, err := c.PgConn().CopyTo(ctx, &w, "COPY (SELECT g, repeat('x', 100) FROM generate_series(1, 1000000) g) TO STDOUT")
	if err != nil || w.lines != 1000000 {
		t.Fatalf("COPY TO: %v %v %d", tag, err, w.lines)
	}
	rows, err := c.Query(ctx, "SELECT g, repeat('y', 100) FROM generate_series(1, 1000000) g", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if rows.Err() != nil || n != 1000000 {
		t.Fatalf("rows %d %v", n, rows.Err())
	}
	close(stop)
	<-sampled
	if grow := int64(peak.Load()) - int64(base.HeapInuse); grow > 32<<20 {
		t.Fatalf("heap grew by %d MiB while streaming ~110 MB twice", grow>>20)
	}
}
