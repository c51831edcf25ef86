package wire

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// retryHooks does with the statements whose text says "retry me" what
// Ordo's session does with an autocommit write: it opens a block at the
// unit's Query, Parse or Bind, holds the unit's ReadyForQuery, rows and
// conflicts (HoldConflicts), and at the end runs the statement again
// (ExecAbortable, or ExecBound bound to the client's parameters) if a
// conflict was held, or if the text says "conflicts once" and this is the
// session's first such commit (a conflict at the commit, after the rows
// were held); then it commits, or fails the commit if the text says
// "commit fails", or if the client saw rows of a statement to be run
// again.
type retryHooks struct{}

func (retryHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	return &retrySession{be: be}, nil
}

type retrySession struct {
	be         Backend
	armed      bool
	fail, once bool
	conflicted bool // a "conflicts once" commit failed
	bound      bool // the unit bound its statement
	query      string
	name       string
	formats    []int16
	params     [][]byte
	results    []int16
	texts      map[string]string // prepared statements by name
}

func (s *retrySession) Statement(ctx context.Context, st *Statement) error {
	sql := st.SQL
	if st.Kind == KindParse {
		if s.texts == nil {
			s.texts = map[string]string{}
		}
		s.texts[st.Name] = sql
	} else if st.Kind == KindBind {
		sql = s.texts[st.Name]
	}
	if st.AtBoundary && strings.Contains(sql, "retry me") {
		if res, err := s.be.Exec(ctx, "BEGIN"); err != nil || res.Err != nil {
			return errors.Join(err, res.Err)
		}
		s.be.HoldReady()
		s.be.HoldConflicts()
		s.armed, s.name, s.query, s.bound = true, st.Name, "", false
		s.fail, s.once = strings.Contains(sql, "commit fails"), strings.Contains(sql, "conflicts once")
		if st.Kind == KindQuery {
			s.query = sql
		}
	}
	if st.Kind == KindBind && s.armed {
		s.formats, s.results = slices.Clone(st.ParamFormats), slices.Clone(st.ResultFormats)
		s.params, s.bound = nil, true
		for _, p := range st.Params {
			s.params = append(s.params, slices.Clone(p))
		}
	}
	return nil
}

func (s *retrySession) ReadyForQuery(byte) {}
func (s *retrySession) Close()             {}

func (s *retrySession) BeforeReady(ctx context.Context) error {
	if !s.armed {
		return nil
	}
	s.armed = false
	conflict := s.be.HeldConflict() != nil
	if s.once && !s.conflicted && s.be.TxStatus() == 'T' && s.be.HeldComplete() {
		// (A unit that only prepared the statement completed nothing.)
		conflict, s.conflicted = true, true
	}
	if conflict && s.be.UnitSentRows() {
		_, _ = s.be.Exec(ctx, "ROLLBACK")
		return errAbortedByTest
	}
	if conflict && (s.query != "" || s.bound) {
		if _, err := s.be.Exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
		if _, err := s.be.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		s.be.ReplaceHeld(nil)
		var res *Result
		var err error
		if s.query != "" {
			res, err = s.be.ExecAbortable(ctx, s.query)
		} else {
			res, err = s.be.ExecBound(ctx, s.name, s.formats, s.params, s.results)
		}
		if err != nil {
			return err
		}
		if res.Err != nil {
			_, _ = s.be.Exec(ctx, "ROLLBACK")
			return res.Err
		}
		s.be.ReplaceHeld(res)
	}
	if s.be.TxStatus() != 'T' {
		_, err := s.be.Exec(ctx, "ROLLBACK")
		return err
	}
	if s.fail {
		_, _ = s.be.Exec(ctx, "ROLLBACK")
		return errAbortedByTest
	}
	res, err := s.be.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	return res.Err
}

// retrySetup makes a table and a function that fails with 40001 the first
// failures times it is called (its sequence is not transactional), then
// returns its argument.
func retrySetup(t *testing.T, table string, failures int) {
	t.Helper()
	ctx := context.Background()
	c := connect(t, pg.DSN("postgres"))
	for _, q := range []string{
		fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (x int)", table),
		fmt.Sprintf("DROP SEQUENCE IF EXISTS %[1]s_s; CREATE SEQUENCE %[1]s_s", table),
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s_once(x int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	IF nextval('%[1]s_s') <= %[2]d THEN
		RAISE EXCEPTION 'a conflict of the test' USING ERRCODE = '40001';
	END IF;
	RETURN x;
END $$`, table, failures),
		fmt.Sprintf("GRANT ALL ON %[1]s, %[1]s_s TO trustuser", table),
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestExtendedStatementRunAgain: a conflict ending an extended-protocol
// statement whose Sync came with it is held, and the statement runs again
// bound to the client's own parameters (ExecBound): the client sees only
// the second run's tag, and the row is there once.
func TestExtendedStatementRunAgain(t *testing.T) {
	retrySetup(t, "rerun", 1)
	p := startProxy(t, retryHooks{}, nil)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
		c := connect(t, p.dsn("trustuser", "", ""))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Exec(ctx, "SELECT setval('rerun_s', 1, false)")
		if err != nil {
			t.Fatal(err)
		}
		tag, err := c.Exec(ctx, "INSERT INTO rerun SELECT rerun_once($1) -- retry me", mode, 42)
		if err != nil {
			t.Fatalf("%v: want the statement run again, got %v", mode, err)
		}
		if tag.String() != "INSERT 0 1" {
			t.Fatalf("%v: tag %q", mode, tag)
		}
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM rerun WHERE x = 42").Scan(&n); err != nil || n != 1 {
			t.Fatalf("%v: %d rows of 42 (%v), want 1", mode, n, err)
		}
		if _, err := c.Exec(ctx, "DELETE FROM rerun"); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

// TestHeldResultsWaitForTheSync: a client may read an Execute's results
// before it sends the Sync (it sent a Flush); HoldConflicts holds them only
// once the Sync was sent, and a result the client read is never run again.
// PostgreSQL's order stays: the completion, then the commit's error.
func TestHeldResultsWaitForTheSync(t *testing.T) {
	retrySetup(t, "flushed", 1)
	p := startProxy(t, retryHooks{}, nil)
	r := dialRaw(t, p.addr, "trustuser")
	exec := func(sql string, param string) {
		r.send(&pgproto3.Parse{Query: sql},
			&pgproto3.Bind{Parameters: [][]byte{[]byte(param)}},
			&pgproto3.Execute{}, &pgproto3.Flush{})
	}
	// A completion before the Sync.
	exec("INSERT INTO flushed VALUES ($1::int) -- retry me", "1")
	if got, want := r.receiveN(3), "ParseComplete\nBindComplete\nCommandComplete INSERT 0 1\n"; got != want {
		t.Fatalf("before the Sync: got\n%swant\n%s", got, want)
	}
	r.send(&pgproto3.Sync{})
	if got := r.untilReady(); got != "ReadyForQuery I\n" {
		t.Fatalf("at the Sync: %s", got)
	}
	// A conflict before the Sync: relayed, not run again.
	exec("INSERT INTO flushed SELECT flushed_once($1::int) -- retry me", "2")
	if got := r.receiveN(3); !strings.Contains(got, "ErrorResponse ERROR 40001") {
		t.Fatalf("before the Sync: got\n%swant the conflict", got)
	}
	r.send(&pgproto3.Sync{})
	if got := r.untilReady(); got != "ReadyForQuery I\n" {
		t.Fatalf("at the Sync: %s", got)
	}
	// The commit fails: the completion, then the error.
	r.send(&pgproto3.Parse{Query: "INSERT INTO flushed VALUES ($1::int) -- retry me, commit fails"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte("3")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	want := "ParseComplete\nBindComplete\nCommandComplete INSERT 0 1\nErrorResponse ERROR 40001 aborted by the test hook\nReadyForQuery I\n"
	if got := r.untilReady(); got != want {
		t.Fatalf("a failed commit: got\n%swant\n%s", got, want)
	}
	c := connect(t, pg.DSN("postgres"))
	var got []int
	rows, _ := c.Query(context.Background(), "SELECT x FROM flushed ORDER BY x")
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || !slices.Equal(got, []int{1}) {
		t.Fatalf("rows %v (%v), want [1]", got, err)
	}
}

// TestExtendedStatementFailsAgain: a statement run again that fails again
// (ExecBound's Execute fails, leaving its portal in the failed
// transaction) is rolled back with an Exec, and the client gets the
// conflict and a usable session. The Exec's Bind used to fail on the
// portal left behind ("cursor already exists"): the rollback failed, and
// every later statement of the session got 25P02.
func TestExtendedStatementFailsAgain(t *testing.T) {
	retrySetup(t, "twice", 2)
	p := startProxy(t, retryHooks{}, nil)
	c := connect(t, p.dsn("trustuser", "", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Exec(ctx, "INSERT INTO twice SELECT twice_once($1) -- retry me", pgx.QueryExecModeExec, 7)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "40001" {
		t.Fatalf("want the second run's 40001, got %v", err)
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("transaction status %c, want I", s)
	}
	tag, err := c.Exec(ctx, "INSERT INTO twice SELECT twice_once($1) -- retry me", pgx.QueryExecModeExec, 8)
	if err != nil || tag.String() != "INSERT 0 1" {
		t.Fatalf("the next statement: %q, %v", tag, err)
	}
}

// TestReturnedRowsOfTheRunThatCommitted: a statement's rows (RETURNING)
// are held with its CommandComplete, and the client receives those of the
// run that committed, in the formats it asked for, whatever protocol it
// used: the first run's rows, which a conflict at its commit undid, never
// reach it. Rows beyond what is held go out, and that statement is not
// run again.
func TestReturnedRowsOfTheRunThatCommitted(t *testing.T) {
	retrySetup(t, "returned", 0)
	p := startProxy(t, retryHooks{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
		c := connect(t, p.dsn("trustuser", "", ""))
		// The run's number: 1, then 2 for the run again.
		rows, err := c.Query(ctx, "INSERT INTO returned VALUES ($1) RETURNING x, nextval('returned_s') -- retry me, conflicts once", mode, 5)
		if err != nil {
			t.Fatal(err)
		}
		type ret struct{ X, N int }
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ret])
		if err != nil || len(got) != 1 || got[0].N != 2 {
			t.Fatalf("%v: got %v (%v), want the second run's one row", mode, got, err)
		}
		if tag := rows.CommandTag().String(); tag != "INSERT 0 1" {
			t.Fatalf("%v: tag %q", mode, tag)
		}
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM returned").Scan(&n); err != nil || n != 1 {
			t.Fatalf("%v: %d rows (%v), want 1", mode, n, err)
		}
		if _, err := c.Exec(ctx, "DELETE FROM returned; SELECT setval('returned_s', 1, false)", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	// More rows than are held: they reach the client, and the conflict
	// after them (its statement is not run again).
	c := connect(t, p.dsn("trustuser", "", ""))
	rows, err := c.Query(ctx, "INSERT INTO returned SELECT g FROM generate_series(1, 300000) g RETURNING x -- retry me, conflicts once")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	var pe *pgconn.PgError
	if err := rows.Err(); !errors.As(err, &pe) || pe.Code != "40001" || n != 300000 {
		t.Fatalf("%d rows, then %v; want 300000, then 40001", n, err)
	}
	if err := c.QueryRow(ctx, "SELECT count(*) FROM returned").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v), want 0", n, err)
	}
}

// TestConflictBeforeSkippedMessagesIsNotHeld: a conflict that ends an
// Execute after which the unit has more than its Sync (a Describe, a
// Close), or that answers the Bind, is relayed as PostgreSQL sends it, and
// its statement is not run again: PostgreSQL skipped those messages, and a
// run again would leave the client without their replies. The transcript
// through the proxy is PostgreSQL's own.
func TestConflictBeforeSkippedMessagesIsNotHeld(t *testing.T) {
	retrySetup(t, "skipped", 1)
	p := startProxy(t, retryHooks{}, nil)
	sql := "INSERT INTO skipped SELECT skipped_once($1::int) -- retry me"
	for _, after := range [][]pgproto3.FrontendMessage{
		{&pgproto3.Describe{ObjectType: 'P'}},
		{&pgproto3.Close{ObjectType: 'P'}},
		{&pgproto3.Describe{ObjectType: 'S'}},
	} {
		script := append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}}, after...)
		script = append(script, &pgproto3.Sync{})
		// The first run fails, a second would not.
		if direct, proxied := transcripts(t, p, "SELECT setval('skipped_s', 1, false)", script); direct != proxied {
			t.Fatalf("%T after the Execute: PostgreSQL sent\n%sthe proxy\n%s", after[0], direct, proxied)
		}
	}
}

// TestHeldUnitsAsPostgreSQLSendsThem: units whose first statement's rows
// and completion are held (HoldConflicts) but that go on with other
// statements reach the client in PostgreSQL's order: what is held goes
// out before anything after it. (The rows of a second portal used to be
// held with the first's, and go out before its CommandComplete.)
func TestHeldUnitsAsPostgreSQLSendsThem(t *testing.T) {
	retrySetup(t, "ordered", 0)
	p := startProxy(t, retryHooks{}, nil)
	ins := "INSERT INTO ordered SELECT g FROM generate_series(1, 3) g RETURNING x -- retry me"
	for _, script := range [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Name: "s", Query: ins}, &pgproto3.Parse{Name: "t", Query: "SELECT 7 UNION ALL SELECT 8"},
			&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "s"}, &pgproto3.Bind{DestinationPortal: "p2", PreparedStatement: "t"},
			&pgproto3.Execute{Portal: "p1"}, &pgproto3.Execute{Portal: "p2"}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Query: ins}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Parse{Query: "SELECT 1/0"},
			&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: ins + "\n; SELECT 9"}},
		{&pgproto3.Query{String: ins + "\n; SELECT 1/0"}},
	} {
		if direct, proxied := transcripts(t, p, "TRUNCATE ordered", script); direct != proxied {
			t.Fatalf("PostgreSQL sent\n%sthe proxy\n%s", direct, proxied)
		}
	}
}

// transcripts runs script as trustuser on PostgreSQL directly, then
// through p, each after reset (as the superuser), and returns what each
// answered up to its ReadyForQuery.
func transcripts(t *testing.T, p *proxy, reset string, script []pgproto3.FrontendMessage) (direct, proxied string) {
	t.Helper()
	admin := connect(t, pg.DSN("postgres"))
	var got []string
	for _, addr := range []string{pg.Addr(), p.addr} {
		if _, err := admin.Exec(context.Background(), reset); err != nil {
			t.Fatal(err)
		}
		r := dialRaw(t, addr, "trustuser")
		r.send(script...)
		got = append(got, r.untilReady())
	}
	return got[0], got[1]
}
