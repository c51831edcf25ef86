package wire

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// testHooks records what the sessions see and rejects or probes on demand.
type testHooks struct {
	mu       sync.Mutex
	sessions []*testSession
	setup    string // Exec'd in NewSession if set
}

type testSession struct {
	be      Backend
	mu      sync.Mutex
	events  []string
	rfq     []byte
	execs   []*Result
	errs    []error
	closed  int
	running bool // a method is running: detects overlapping calls
	overlap bool
	// atBoundary: each statement at a unit's boundary, with the
	// transaction status the session reports there.
	atBoundary []string
}

var errAbortedByTest = &pgconn.PgError{Code: "40001", Message: "aborted by the test hook"}

var errForbidden = &pgconn.PgError{Code: "42501", Message: "forbidden by the test hook"}

func (h *testHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	if info.User == "" || info.Database != "postgres" {
		return nil, fmt.Errorf("bad SessionInfo %+v", info)
	}
	s := &testSession{be: be}
	if h.setup != "" {
		res, err := be.Exec(ctx, h.setup)
		if err != nil || res.Err != nil {
			return nil, fmt.Errorf("setup: %v %v", err, res)
		}
	}
	h.mu.Lock()
	h.sessions = append(h.sessions, s)
	h.mu.Unlock()
	return s, nil
}

func (h *testHooks) last() *testSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[len(h.sessions)-1]
}

func (s *testSession) enter() {
	s.mu.Lock()
	if s.running {
		s.overlap = true
	}
	s.running = true
	s.mu.Unlock()
}

func (s *testSession) leave() {
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
}

func (s *testSession) Statement(ctx context.Context, st *Statement) error {
	s.enter()
	defer s.leave()
	var ev string
	switch st.Kind {
	case KindQuery:
		ev = "Query " + st.SQL
	case KindParse:
		ev = fmt.Sprintf("Parse %s %s %v", st.Name, st.SQL, st.ParamOIDs)
	case KindBind:
		params := make([]string, len(st.Params))
		for i, p := range st.Params {
			params[i] = string(p)
		}
		ev = fmt.Sprintf("Bind %s %s %v", st.Portal, st.Name, params)
		st.WatchExecute = strings.HasPrefix(st.Portal, "w") || st.Name == "watched"
	case KindCloseStatement:
		ev = "CloseStatement " + st.Name
	}
	s.mu.Lock()
	s.events = append(s.events, ev)
	if st.AtBoundary {
		s.atBoundary = append(s.atBoundary, fmt.Sprintf("%s @%c", st.SQL, s.be.TxStatus()))
	}
	s.mu.Unlock()
	if strings.Contains(st.SQL, "forbidden") {
		return errForbidden
	}
	for _, p := range st.Params {
		if string(p) == "bad" {
			return errors.New("bad parameter")
		}
	}
	if strings.Contains(st.SQL, "probe") {
		res, err := s.be.Exec(ctx, "SELECT 7, NULL; SELECT 8")
		s.mu.Lock()
		s.execs = append(s.execs, res)
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	if strings.Contains(st.SQL, "abortended") {
		// Abort the transaction, then end it with an Exec of the hook's
		// own (as the session layer's rollback does).
		s.be.Abort(errAbortedByTest)
		res, err := s.be.Exec(ctx, "ROLLBACK")
		s.mu.Lock()
		s.execs = append(s.execs, res)
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	if strings.Contains(st.SQL, "failexec") {
		res, err := s.be.Exec(ctx, "SELECT 1/0")
		s.mu.Lock()
		s.execs = append(s.execs, res)
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	return nil
}

// Executed implements PortalWatcher.
func (s *testSession) Executed(portal string) {
	s.enter()
	defer s.leave()
	s.mu.Lock()
	s.events = append(s.events, "Executed "+portal)
	s.mu.Unlock()
}

func (s *testSession) ReadyForQuery(txStatus byte) {
	s.enter()
	defer s.leave()
	s.mu.Lock()
	s.rfq = append(s.rfq, txStatus)
	s.mu.Unlock()
}

func (s *testSession) Close() {
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
}

func (s *testSession) snapshot() (events []string, rfq string, closed int, overlap bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...), string(s.rfq), s.closed, s.overlap
}

func TestHooksObserve(t *testing.T) {
	h := &testHooks{}
	p := startProxy(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.superDSN("default_query_exec_mode=cache_statement"))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := c.QueryRow(ctx, "SELECT $1::text", "param-value").Scan(&s); err != nil || s != "param-value" {
		t.Fatal(s, err)
	}
	for _, sql := range []string{"BEGIN", "SELECT 1/0", "ROLLBACK"} {
		_, _ = c.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	}
	c.Close(ctx)
	ts := h.last()
	waitFor(t, func() bool { _, _, closed, _ := ts.snapshot(); return closed == 1 })
	events, rfq, _, overlap := ts.snapshot()
	joined := strings.Join(events, "\n")
	for _, want := range []string{"Parse stmtcache_", "SELECT $1::text []", "Bind  stmtcache_", "[param-value]", "Query BEGIN", "Query SELECT 1/0", "Query ROLLBACK"} {
		if !strings.Contains(joined, want) {
			t.Errorf("events lack %q:\n%s", want, joined)
		}
	}
	if !strings.HasSuffix(rfq, "TEI") {
		t.Errorf("ReadyForQuery statuses %q, want suffix TEI", rfq)
	}
	if overlap {
		t.Error("hook methods overlapped")
	}
}

func TestHooksReject(t *testing.T) {
	h := &testHooks{}
	p := startProxy(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := connect(t, p.superDSN(""))
	wantForbidden := func(err error) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" || pe.Message != errForbidden.Message {
			t.Fatalf("want the hook's 42501, got %v", err)
		}
	}
	_, err := c.Exec(ctx, "SELECT 'forbidden'", pgx.QueryExecModeSimpleProtocol)
	wantForbidden(err)
	_, err = c.Exec(ctx, "SELECT 'forbidden'") // extended: rejected at Parse
	wantForbidden(err)
	var n int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("session unusable after rejection: %v", err)
	}

	// Rejection inside a transaction fails the transaction, as a real error.
	if _, err := c.Exec(ctx, "CREATE TABLE hook_t(a text)"); err != nil {
		t.Fatal(err)
	}
	defer c.Exec(context.Background(), "DROP TABLE hook_t")
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO hook_t VALUES ($1)", "good"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "INSERT INTO hook_t VALUES ($1)", "bad") // rejected at Bind
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeInternal || pe.Message != "bad parameter" {
		t.Fatalf("want XX000 bad parameter, got %v", err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); !errors.As(err, &pe) || pe.Code != "25P02" {
		t.Fatalf("want 25P02 after rejection in a transaction, got %v", err)
	}
	_ = tx.Rollback(ctx)
	if err := c.QueryRow(ctx, "SELECT count(*) FROM hook_t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after rolled-back transaction: %d %v", n, err)
	}
	if c.PgConn().TxStatus() != 'I' {
		t.Fatalf("tx status %c", c.PgConn().TxStatus())
	}
}

func TestHooksExec(t *testing.T) {
	h := &testHooks{setup: "SET application_name = 'hooked'"}
	p := startProxy(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Exec from NewSession changed the session.
	c := connect(t, p.superDSN(""))
	var app string
	if err := c.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app); err != nil || app != "hooked" {
		t.Fatalf("application_name %q %v", app, err)
	}

	// Pipelined: the probe's Exec waits for the sleep, its replies are
	// swallowed, and the client's transcript is unchanged.
	r := dialRaw(t, p.addr, "trustuser")
	ts := h.last()
	r.send(q("SELECT pg_sleep(0.2)"), q("BEGIN"), q("SELECT 'probe'"), q("SELECT 'failexec'"), q("COMMIT"))
	var got strings.Builder
	for i := 0; i < 5; i++ {
		got.WriteString(r.untilReady())
	}
	want := "RowDescription pg_sleep:2278\nDataRow \"\"\nCommandComplete SELECT 1\nReadyForQuery I\n" +
		"CommandComplete BEGIN\nReadyForQuery T\n" +
		"RowDescription ?column?:25\nDataRow \"probe\"\nCommandComplete SELECT 1\nReadyForQuery T\n" +
		// The hook's failed Exec aborted the transaction first.
		"ErrorResponse ERROR 25P02 current transaction is aborted, commands ignored until end of transaction block\nReadyForQuery E\n" +
		"CommandComplete ROLLBACK\nReadyForQuery I\n"
	if got.String() != want {
		t.Fatalf("client transcript\n%s\nwant\n%s", got.String(), want)
	}
	ts.mu.Lock()
	execs, errs := ts.execs, ts.errs
	ts.mu.Unlock()
	if len(execs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("execs %v errs %v", execs, errs)
	}
	if r0 := execs[0]; fmt.Sprint(r0.Rows) != "[[7 ] [8]]" || fmt.Sprint(r0.Tags) != "[SELECT 1 SELECT 1]" || r0.TxStatus != 'T' || r0.Err != nil {
		t.Fatalf("probe result %+v", r0)
	}
	var pe *pgconn.PgError
	if r1 := execs[1]; !errors.As(r1.Err, &pe) || pe.Code != "22012" || r1.TxStatus != 'E' {
		t.Fatalf("failexec result %+v", r1)
	}

	// Inside an unfinished extended batch Exec refuses.
	r.send(&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Parse{Query: "SELECT 'probe'"}, &pgproto3.Sync{})
	if got := r.untilReady(); got != "ParseComplete\nParseComplete\nReadyForQuery I\n" {
		t.Fatalf("batch transcript %s", got)
	}
	ts.mu.Lock()
	lastErr := ts.errs[len(ts.errs)-1]
	ts.mu.Unlock()
	if !errors.Is(lastErr, ErrNotAtBoundary) {
		t.Fatalf("Exec inside a batch: %v", lastErr)
	}
}

// TestAbortEndedByExec: once an Exec of the hooks ends the transaction
// Abort hit, nothing of that abort is left: a later error of another
// transaction reaches the client as PostgreSQL raised it, not as the
// abort's error.
func TestAbortEndedByExec(t *testing.T) {
	h := &testHooks{}
	p := startProxy(t, h, nil)
	r := dialRaw(t, p.addr, "trustuser")
	r.send(q("BEGIN"))
	if got := r.untilReady(); got != "CommandComplete BEGIN\nReadyForQuery T\n" {
		t.Fatalf("BEGIN: %s", got)
	}
	// The statement runs after the hook's ROLLBACK, outside the
	// transaction Abort hit, and fails on its own: the client gets its
	// error.
	r.send(q("SELECT 1/0, 'abortended'"))
	if got := r.untilReady(); !strings.Contains(got, "22012 division by zero") || !strings.HasSuffix(got, "ReadyForQuery I\n") {
		t.Fatalf("the statement after the hook's ROLLBACK: %s", got)
	}
	ts := h.last()
	ts.mu.Lock()
	execs, errs := ts.execs, ts.errs
	ts.mu.Unlock()
	if len(execs) != 1 || errs[0] != nil || execs[0].Err != nil || execs[0].TxStatus != 'I' {
		t.Fatalf("the hook's ROLLBACK: %+v %v", execs, errs)
	}
	r.send(q("SELECT 1/0"))
	if got := r.untilReady(); !strings.Contains(got, "22012 division by zero") {
		t.Fatalf("the next statement: %s", got)
	}
}

func TestChangedRows(t *testing.T) {
	for tag, want := range map[string]int64{
		"INSERT 0 3": 3, "INSERT 0 0": 0, "UPDATE 2": 2, "DELETE 10": 10, "MERGE 1": 1,
		"SELECT 5": 0, "COPY 7": 0, "BEGIN": 0, "INSERT 0": 0, "UPDATE x": 0, "": 0, "CREATE TABLE": 0,
	} {
		if got := changedRows(tag); got != want {
			t.Errorf("changedRows(%q) = %d, want %d", tag, got, want)
		}
	}
}

// TestCopyDataBeforeCopyInResponse: a client sends a COPY's data without
// waiting for CopyInResponse, after a Sync that followed the COPY's
// Execute, and the next units with it. PostgreSQL ignores that Sync only
// if the COPY started; when the COPY failed, it answers it. Each unit
// after it must start once the one before is answered, seeing the
// transaction status PostgreSQL reported for it (the session took every
// such Sync for ignored, and the unit after a failed COPY's ROLLBACK saw
// the failed block's status).
func TestCopyDataBeforeCopyInResponse(t *testing.T) {
	h := &testHooks{}
	p := startProxy(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := connect(t, p.superDSN(""))
	if _, err := c.Exec(ctx, "create table if not exists copy_early(x int); grant all on copy_early to trustuser"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	// run sends setup (a unit at a time) and then msgs at once on a new
	// session, reads readies ReadyForQuery replies, and checks that the
	// last units answered as they should and that each unit saw, at its
	// boundary, the transaction status PostgreSQL reported for the one
	// before it (want: "SQL @status|…").
	const tail = "DataRow \"2\"\nCommandComplete SELECT 1\nReadyForQuery T\nCommandComplete ROLLBACK\nReadyForQuery I\n"
	run := func(name string, setup [][]pgproto3.FrontendMessage, msgs []pgproto3.FrontendMessage, readies int, want string) {
		t.Helper()
		r := dialRaw(t, p.addr, "trustuser")
		ts := h.last()
		for _, unit := range setup {
			r.send(unit...)
			r.untilReady()
		}
		r.send(msgs...)
		var got strings.Builder
		for i := 0; i < readies; i++ {
			got.WriteString(r.untilReady())
		}
		if !strings.HasSuffix(got.String(), tail) {
			t.Fatalf("%s: replies\n%s", name, got.String())
		}
		ts.mu.Lock()
		seen := strings.Join(ts.atBoundary, "|")
		ts.mu.Unlock()
		if seen != want {
			t.Errorf("%s: units at their boundaries\n got %s\nwant %s", name, seen, want)
		}
	}
	// After the COPY's unit comes one that opens a block, slowly, and the
	// one after it must see that block.
	after := []pgproto3.FrontendMessage{
		&pgproto3.Query{String: "select pg_sleep(0.3); begin"},
		&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.Query{String: "rollback"},
	}
	copyIn := func(table string, sync bool) []pgproto3.FrontendMessage {
		msgs := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "copy " + table + " from stdin"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
		if sync {
			msgs = append(msgs, &pgproto3.Sync{})
		}
		return append(msgs, &pgproto3.CopyData{Data: []byte("1\n")}, &pgproto3.CopyDone{})
	}
	sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
	join := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
		var all []pgproto3.FrontendMessage
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	const afterWant = "select pg_sleep(0.3); begin @I|select 2 @T|rollback @T"
	// A Sync after the Execute: answered when the COPY fails (five
	// ReadyForQuery in all), ignored when it runs (four).
	run("a COPY that fails", nil, join(copyIn("no_such_table", true), sync, after), 5,
		"copy no_such_table from stdin @I|"+afterWant)
	run("a COPY that runs", nil, join(copyIn("copy_early", true), sync, after), 4,
		"copy copy_early from stdin @I|"+afterWant)
	// A COPY that fails, and its data, with no Sync after the data: the
	// Sync after the Execute is the one PostgreSQL answers.
	run("a COPY that fails, no Sync after its data", nil, join(copyIn("no_such_table", true), after), 4,
		"copy no_such_table from stdin @I|"+afterWant)
	// Two COPYs in one batch, in a block: the first runs, the second
	// fails, with a Sync after its Execute. The first's CopyInResponse
	// says nothing of the second's fate.
	run("two COPYs in a batch", [][]pgproto3.FrontendMessage{{&pgproto3.Query{String: "begin"}}},
		join(copyIn("copy_early", false), copyIn("no_such_table", true), sync,
			[]pgproto3.FrontendMessage{&pgproto3.Query{String: "rollback; select pg_sleep(0.3); begin"}}, after[1:]), 5,
		"begin @I|copy copy_early from stdin @T|rollback; select pg_sleep(0.3); begin @E|select 2 @T|rollback @T")
	// A COPY whose Bind the hooks refuse (raised at its Execute, in
	// whose place Ordo sends a Describe of its own), after a COPY that
	// ran: its fate is the Describe's, not the earlier Execute's.
	refused := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "copy copy_early from stdin", ParameterOIDs: []uint32{25}},
		&pgproto3.Bind{Parameters: [][]byte{[]byte("bad")}}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.CopyData{Data: []byte("2\n")}, &pgproto3.CopyDone{}}
	run("a refused COPY", [][]pgproto3.FrontendMessage{join(copyIn("copy_early", true), sync)}, join(refused, after), 4,
		"copy copy_early from stdin @I|copy copy_early from stdin @I|"+afterWant)
}

// TestHooksToldOfWatchedExecutes: the hooks are told of every Execute of
// a portal name a Bind asked for (WatchExecute) until its transaction
// ends: after a row limit, after the name was bound again, closed, or the
// unnamed portal dropped by a Query (PostgreSQL may have skipped those,
// after an error in their batch: only the hooks, which see every Bind, can
// tell what the portal holds), in a later batch of its block; not once
// its transaction ended, nor when PostgreSQL skips the Execute after a
// message of the batch the hooks refused.
func TestHooksToldOfWatchedExecutes(t *testing.T) {
	h := &testHooks{}
	p := startProxy(t, h, nil)
	r := dialRaw(t, p.addr, "trustuser")
	parse := func(name, sql string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: sql} }
	r.send(parse("watched", "SELECT 1"), parse("other", "SELECT 2"), &pgproto3.Sync{})
	r.untilReady()
	steps := [][]pgproto3.FrontendMessage{
		// told twice: executed twice (a row limit)
		{&pgproto3.Bind{DestinationPortal: "w1", PreparedStatement: "other"}, &pgproto3.Execute{Portal: "w1", MaxRows: 1}, &pgproto3.Execute{Portal: "w1"}, &pgproto3.Sync{}},
		// bound again without asking, then executed: told
		{&pgproto3.Bind{PreparedStatement: "watched"}, &pgproto3.Bind{PreparedStatement: "other"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		// closed, then an Execute (PostgreSQL fails it): told
		{&pgproto3.Query{String: "BEGIN"}},
		{&pgproto3.Bind{DestinationPortal: "w2", PreparedStatement: "other"}, &pgproto3.Close{ObjectType: 'P', Name: "w2"}, &pgproto3.Sync{}},
		{&pgproto3.Execute{Portal: "w2"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "ROLLBACK"}},
		// the unnamed portal dropped by a Query in its block: told
		{&pgproto3.Query{String: "BEGIN"}},
		{&pgproto3.Bind{PreparedStatement: "watched"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "SELECT 3"}},
		{&pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "ROLLBACK"}},
		// bound in one batch of a block, executed in the next: told
		{&pgproto3.Query{String: "BEGIN"}},
		{&pgproto3.Bind{DestinationPortal: "w3", PreparedStatement: "other"}, &pgproto3.Sync{}},
		{&pgproto3.Execute{Portal: "w3"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "COMMIT"}},
		// bound outside a block, its transaction over at the Sync: not told
		{&pgproto3.Bind{DestinationPortal: "w4", PreparedStatement: "other"}, &pgproto3.Sync{}},
		{&pgproto3.Execute{Portal: "w4"}, &pgproto3.Sync{}},
		// after a message the hooks refused, PostgreSQL skips it: not told
		{&pgproto3.Query{String: "BEGIN"}},
		{&pgproto3.Bind{DestinationPortal: "w5", PreparedStatement: "other"}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Query: "SELECT 'forbidden'"}, &pgproto3.Execute{Portal: "w5"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "ROLLBACK"}},
	}
	for _, msgs := range steps {
		r.send(msgs...)
		r.untilReady()
	}
	var told []string
	events, _, _, overlap := h.last().snapshot()
	for _, e := range events {
		if strings.HasPrefix(e, "Executed") {
			told = append(told, e)
		}
	}
	if got, want := strings.Join(told, ","), "Executed w1,Executed w1,Executed ,Executed w2,Executed ,Executed w3"; got != want {
		t.Errorf("told %q, want %q; events:\n%s", got, want, strings.Join(events, "\n"))
	}
	if overlap {
		t.Error("hook methods overlapped")
	}
}

// TestRefusedBindsAreRefusedAtEveryExecute: a Bind the hooks refused is
// refused at an Execute of its portal whenever that comes in its
// transaction: in a later batch (the refusal was dropped at the Sync, and
// the Execute in the next batch ran the refused statement: review of
// e00642c), and beside another refused Bind of the same batch (only the
// last refusal was kept). A Bind of the name the hooks accept replaces it,
// and a refusal ends with its transaction.
func TestRefusedBindsAreRefusedAtEveryExecute(t *testing.T) {
	h := &testHooks{}
	p := startProxy(t, h, nil)
	r := dialRaw(t, p.addr, "trustuser")
	bind := func(portal, param string) *pgproto3.Bind {
		return &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: "s", Parameters: [][]byte{[]byte(param)}}
	}
	r.send(&pgproto3.Parse{Name: "s", Query: "SELECT $1::text"}, &pgproto3.Parse{Name: "one", Query: "SELECT 1"}, &pgproto3.Sync{})
	r.untilReady()
	fail := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	const endMarked = 34 // the steps (and endMarked+5) read up to their Query of 'end-marker'
	for i, step := range []struct {
		msgs []pgproto3.FrontendMessage
		want string // in the transcript
		not  string // not in it
	}{
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("r1", "bad"), bind("r2", "bad"), &pgproto3.Sync{}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "r1"}, &pgproto3.Sync{}}, "bad parameter", "DataRow"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}, "ReadyForQuery I", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("r3", "bad"), bind("r4", "bad"), &pgproto3.Execute{Portal: "r3"}, &pgproto3.Sync{}}, "bad parameter", "DataRow"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}, "ReadyForQuery I", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("", "bad"), &pgproto3.Sync{}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{bind("", "good"), &pgproto3.Execute{}, &pgproto3.Sync{}}, "DataRow", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}, "ReadyForQuery I", ""},
		{[]pgproto3.FrontendMessage{bind("r5", "bad"), &pgproto3.Sync{}}, "ReadyForQuery I", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "t", Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: "r5", PreparedStatement: "t"}, &pgproto3.Execute{Portal: "r5"}, &pgproto3.Sync{}}, "DataRow", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}, "ReadyForQuery I", ""},
		// A Bind of the name the hooks accept, which PostgreSQL refuses
		// (the portal exists, 42P03), or a Close and a Bind it skips
		// (after an error of their batch): a ROLLBACK TO keeps the
		// refused portal, and it stays refused (third review).
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("r6", "bad"), bind("r7", "bad"), &pgproto3.Sync{}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "SAVEPOINT sp"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Bind{DestinationPortal: "r6", PreparedStatement: "one"}, &pgproto3.Sync{}}, "42P03", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK TO sp"}}, "ReadyForQuery T", ""},
		{append(slices.Clone(fail), &pgproto3.Close{ObjectType: 'P', Name: "r7"}, &pgproto3.Bind{DestinationPortal: "r7", PreparedStatement: "one"}, &pgproto3.Sync{}), "22012", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK TO sp"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "r6"}, &pgproto3.Sync{}}, "bad parameter", "DataRow"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK TO sp"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "r7"}, &pgproto3.Sync{}}, "bad parameter", "DataRow"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}, "ReadyForQuery I", ""},
		// A Close that ran ends the refusal: a cursor of the name runs.
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("r8", "bad"), &pgproto3.Close{ObjectType: 'P', Name: "r8"}, &pgproto3.Sync{}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "DECLARE r8 CURSOR FOR SELECT 'cursor'"}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "r8"}, &pgproto3.Sync{}}, "DataRow", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}, "ReadyForQuery I", ""},
		// A Query the hooks would refuse inside the batch, after its
		// error: refused, Ordo ended it with a Sync of its own, after which
		// PostgreSQL ran the ROLLBACK TO, and the Close it skipped before
		// replaced nothing (fourth review). Now PostgreSQL skips the
		// Queries, as it does without Ordo, and the hooks do not see them
		// (TestQueryInsideABatch): the refused portal does not run, and
		// the block stays failed.
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("r9", "bad"), &pgproto3.Sync{}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "SAVEPOINT sp"}}, "ReadyForQuery T", ""},
		{append(slices.Clone(fail), &pgproto3.Close{ObjectType: 'P', Name: "r9"}, &pgproto3.Query{String: "SELECT 'forbidden'"},
			&pgproto3.Query{String: "ROLLBACK TO sp"}, &pgproto3.Execute{Portal: "r9"}, &pgproto3.Sync{}, &pgproto3.Query{String: "SELECT 'end-marker'"}), "25P02", "DataRow"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}, "ReadyForQuery I", ""},
		// The same while Ordo itself skips the batch (after a Parse it
		// refused): its Sync for the refused Query ended PostgreSQL's
		// skipping all the same (fifth review).
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{bind("r10", "bad"), &pgproto3.Sync{}}, "ReadyForQuery T", "Error"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "SAVEPOINT sp"}}, "ReadyForQuery T", ""},
		{[]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 'forbidden'"}, &pgproto3.Query{String: "SELECT 'forbidden'"},
			&pgproto3.Query{String: "ROLLBACK TO sp"}, &pgproto3.Execute{Portal: "r10"}, &pgproto3.Sync{}, &pgproto3.Query{String: "SELECT 'end-marker'"}}, "25P02", "DataRow"},
		{[]pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}, "ReadyForQuery I", ""},
	} {
		r.send(step.msgs...)
		got := r.untilReady()
		// (The marker's Query is answered 25P02 if the block failed.)
		for (i == endMarked || i == endMarked+5) && !strings.Contains(got, "end-marker") && !strings.Contains(got, "25P02") && !strings.Contains(got, "receive error") {
			got += r.untilReady()
		}
		if !strings.Contains(got, step.want) || step.not != "" && strings.Contains(got, step.not) {
			t.Errorf("step %d: want %q and not %q in:\n%s", i, step.want, step.not, got)
		}
	}
}

// TestQueryInsideABatch: a simple Query inside an extended-protocol batch
// gets what PostgreSQL gives it. After an error earlier in the batch
// PostgreSQL skips it, with no reply and no ReadyForQuery: the session
// counted one and hung, answering nothing more. A Query the hooks refuse
// there no longer reaches them, so its refusal (which Ordo ends with a
// Sync of its own) no longer lets PostgreSQL run the rest of the batch,
// which it skips.
func TestQueryInsideABatch(t *testing.T) {
	p := startProxy(t, &testHooks{}, nil)
	fail := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	ok := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	after := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 'after'"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	cat := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return slices.Concat(parts...) }
	q := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
	for _, tc := range []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		{"skipped after an error", cat(fail, q("SELECT 2"), sync)},
		{"two statements skipped", cat(fail, q("SELECT 2; SELECT 3"), sync)},
		{"skipped in a block", cat(q("BEGIN"), fail, q("SELECT 2"), after, sync, q("ROLLBACK"))},
		{"refused, skipped: the rest skipped too", cat(fail, q("SELECT 'forbidden'"), after, sync)},
		{"a FunctionCall skipped after an error", cat(fail, []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: 1251 /* int4abs */, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}}, after, sync)},
		{"run when nothing failed", cat(ok, q("SELECT 2"), after, sync)},
		{"refused when nothing failed", cat(ok, q("SELECT 'forbidden'"), after, sync)},
		// A Query's own error does not make PostgreSQL skip what follows
		// it (its ReadyForQuery ends the batch, as a Sync would): a later
		// Query of the batch was dropped, taken for skipped (review).
		{"a failed Query, then a Query", cat(ok, q("SELECT 1/0"), q("SELECT 2"), sync)},
		{"a failed Query, then a FunctionCall", cat(ok, q("SELECT 1/0"), []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: 1251, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}}, sync)},
		{"a failed Query, then extended messages", cat(ok, q("SELECT 1/0"), after, sync)},
		{"two Queries, the second failing, then a Query", cat(ok, q("SELECT 2"), q("SELECT 1/0"), q("SELECT 3"), sync)},
		{"refused when nothing failed, then a Query", cat(ok, q("SELECT 'forbidden'"), q("SELECT 'after'"), sync)},
		{"refused when nothing failed, then a FunctionCall", cat(ok, q("SELECT 'forbidden'"), []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: 1251, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}}, after, sync)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			transcript := func(addr string) string {
				r := dialRaw(t, addr, "trustuser")
				r.send(append(slices.Clone(tc.msgs), &pgproto3.Query{String: "SELECT 'end-marker'"})...)
				var got string
				for !strings.Contains(got, "end-marker") && !strings.Contains(got, "receive error") {
					got += r.untilReady()
				}
				return got // (up to the marker's ReadyForQuery)
			}
			direct, through := transcript(pg.Addr()), transcript(p.addr)
			if strings.Contains(tc.name, "refused") && strings.Contains(tc.name, "nothing failed") {
				// The hooks' refusal in the Query's place, the rest as
				// PostgreSQL runs it.
				if !strings.Contains(through, "forbidden by the test hook") || !strings.Contains(through, "after") || !strings.Contains(through, "end-marker") {
					t.Fatalf("through the proxy:\n%s", through)
				}
				return
			}
			if direct != through {
				t.Fatalf("directly:\n%s\nthrough the proxy:\n%s", direct, through)
			}
		})
	}
}
