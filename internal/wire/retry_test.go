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
// Ordo's session does with an autocommit write sent with the extended
// protocol: it opens a block at the unit's Parse, holds the unit's
// ReadyForQuery and conflicts (HoldConflicts), and at the end runs the
// statement again, bound to the client's parameters, if a conflict was
// held; then it commits, or fails the commit if the text says
// "commit fails".
type retryHooks struct{}

func (retryHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	return &retrySession{be: be}, nil
}

type retrySession struct {
	be      Backend
	armed   bool
	fail    bool
	name    string
	formats []int16
	params  [][]byte
	texts   map[string]string // prepared statements by name
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
		s.armed, s.fail, s.name = true, strings.Contains(sql, "commit fails"), st.Name
	}
	if st.Kind == KindBind && s.armed {
		s.formats = slices.Clone(st.ParamFormats)
		s.params = nil
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
	if s.be.HeldConflict() != nil && !s.be.UnitSentRows() {
		if _, err := s.be.Exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
		if _, err := s.be.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		s.be.ReplaceHeldTag("")
		res, err := s.be.ExecBound(ctx, s.name, s.formats, s.params)
		if err != nil {
			return err
		}
		if res.Err != nil {
			_, _ = s.be.Exec(ctx, "ROLLBACK")
			return res.Err
		}
		s.be.ReplaceHeldTag(res.Tags[0])
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
