package wire

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// thenHooks are the test hooks with a step of their own after each
// Statement (then), which may answer it (Completed) or Exec.
type thenHooks struct {
	testHooks
	then func(ctx context.Context, s *testSession, st *Statement) error
}

type thenSession struct {
	*testSession
	then func(ctx context.Context, s *testSession, st *Statement) error
}

func (h *thenHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	s, err := h.testHooks.NewSession(ctx, info, be)
	if err != nil {
		return nil, err
	}
	return thenSession{s.(*testSession), h.then}, nil
}

func (s thenSession) Statement(ctx context.Context, st *Statement) error {
	if err := s.testSession.Statement(ctx, st); err != nil {
		return err
	}
	return s.then(ctx, s.testSession, st)
}

// completingHooks answer a Query "NOTIFY ordo_c…" themselves (Completed,
// as the session layer answers a NOTIFY inside a block, or Ordo's kept
// objects): PostgreSQL alone answers it CommandComplete NOTIFY and a
// ReadyForQuery, which is the reference.
func completingHooks() *thenHooks {
	return &thenHooks{then: func(_ context.Context, _ *testSession, st *Statement) error {
		if st.Kind == KindQuery && strings.HasPrefix(st.SQL, "NOTIFY ordo_c") {
			return &Completed{Tag: "NOTIFY"}
		}
		return nil
	}}
}

// execingHooks Exec one plain statement at a Parse whose text says exec1,
// as the session layer Execs at a unit's first message (SET LOCAL,
// sequence positions, cons's classes).
func execingHooks() *thenHooks {
	return &thenHooks{then: func(ctx context.Context, s *testSession, st *Statement) error {
		if strings.Contains(st.SQL, "exec1") {
			if _, err := s.be.Exec(ctx, "SELECT 7"); err != nil && err != ErrNotAtBoundary {
				return err
			}
		}
		return nil
	}}
}

// Message sequences of the tests below.
func pbe(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
}
func query(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
}
func withSync(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
	return append(slices.Concat(parts...), &pgproto3.Sync{})
}

// compareBatch sends msgs then a marker Query, directly and through p,
// and fails if the transcripts (up to the marker's ReadyForQuery) differ.
func compareBatch(t *testing.T, p *proxy, setup string, steps ...[]pgproto3.FrontendMessage) {
	t.Helper()
	direct, through := batchTranscript(t, pg.Addr(), setup, steps), batchTranscript(t, p.addr, setup, steps)
	if direct != through {
		t.Fatalf("directly:\n%s\nthrough the proxy:\n%s", direct, through)
	}
}

// batchTranscript is what the server at addr answers to setup and steps,
// each followed by a marker Query, up to each marker's ReadyForQuery.
func batchTranscript(t *testing.T, addr, setup string, steps [][]pgproto3.FrontendMessage) string {
	t.Helper()
	r := dialRaw(t, addr, "trustuser")
	if setup != "" {
		r.send(&pgproto3.Query{String: setup})
		r.untilReady()
	}
	var got string
	for i, msgs := range steps {
		marker := "end-marker-" + string(rune('a'+i))
		r.send(append(slices.Clone(msgs), &pgproto3.Query{String: "SELECT '" + marker + "'"})...)
		for {
			more := r.untilReady()
			got += more
			// (PostgreSQL 18.6 answers the statement after a batch
			// that ended in a Query XX000, and does not run it:
			// compatibility.md.)
			if strings.Contains(more, marker) || strings.Contains(more, "25P02") || strings.Contains(more, "XX000") || strings.Contains(more, "receive error") {
				break
			}
		}
	}
	return got
}

// TestCompletedInsideABatch: a Query the hooks answer themselves
// (Completed) inside an extended-protocol batch ends the batch as
// PostgreSQL's running it would: its ReadyForQuery gives the status
// PostgreSQL has (a BEGIN bound earlier in the batch: 'T', not 'I'), and
// what comes after it no longer shares the batch's implicit transaction
// (an error after it rolled back an insert the client had been told was
// done). Found by a review of e5956fc; each failing case failed before.
func TestCompletedInsideABatch(t *testing.T) {
	p := startProxy(t, completingHooks(), nil)
	q := query

	t.Run("at a boundary (control)", func(t *testing.T) {
		compareBatch(t, p, "", q("NOTIFY ordo_c"))
	})
	t.Run("in a block, inside a batch (control)", func(t *testing.T) {
		compareBatch(t, p, "", q("BEGIN"), withSync(pbe("SELECT 1"), q("NOTIFY ordo_c"), pbe("SELECT 1/0"), q("SELECT 2")), q("ROLLBACK"))
	})
	// The batch's BEGIN (bound) makes its implicit transaction a block:
	// PostgreSQL's ReadyForQuery after the Query says 'T'; the hooks'
	// answer says the status of the last ReadyForQuery before the batch.
	t.Run("after a BEGIN bound in the batch", func(t *testing.T) {
		compareBatch(t, p, "", withSync(pbe("SELECT 1"), pbe("BEGIN"), q("NOTIFY ordo_c")), q("ROLLBACK"))
	})
	// PostgreSQL commits the batch so far at the Query's end; answered
	// by the hooks, the batch goes on, and a later error of it rolls
	// back what the client was told had ended ('I').
	t.Run("an error after it, outside a block", func(t *testing.T) {
		compareBatchAsOn15(t, p, `DataRow "1"`, "CREATE TEMP TABLE rc(i int)",
			withSync(pbe("INSERT INTO rc VALUES (1)"), q("NOTIFY ordo_c"), pbe("SELECT 1/0")),
			q("SELECT count(*) FROM rc"))
	})
	// No Sync after it (the client was answered a ReadyForQuery, as
	// pgjdbc's extendedForPrepared expects): the next Query fails, and
	// PostgreSQL, still in the batch's implicit transaction, rolls back
	// what it would have committed at the first Query.
	t.Run("no Sync after it, then a failing Query", func(t *testing.T) {
		compareBatchAsOn15(t, p, `DataRow "1"`, "CREATE TEMP TABLE rc(i int)",
			slices.Concat(pbe("INSERT INTO rc VALUES (1)"), q("NOTIFY ordo_c"), q("SELECT 1/0")),
			q("SELECT count(*) FROM rc"))
	})
}

// TestCopyInsideABatchThenQuery: COPY started by an Execute, a Query after
// its end and before the Sync, a Query during it; and a FunctionCall.
func TestCopyInsideABatchThenQuery(t *testing.T) {
	p := startProxy(t, &testHooks{}, nil)
	cp := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "COPY rc FROM STDIN"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	data := &pgproto3.CopyData{Data: []byte("5\n")}
	fc := &pgproto3.FunctionCall{Function: 1251, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}
	for _, tc := range []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		{"query after CopyDone", slices.Concat(cp, []pgproto3.FrontendMessage{data, &pgproto3.CopyDone{}, &pgproto3.Query{String: "SELECT count(*) FROM rc"}, &pgproto3.Sync{}})},
		{"query after CopyFail", slices.Concat(cp, []pgproto3.FrontendMessage{data, &pgproto3.CopyFail{Message: "no"}, &pgproto3.Query{String: "SELECT count(*) FROM rc"}, &pgproto3.Sync{}})},
		{"functioncall after CopyDone", slices.Concat(cp, []pgproto3.FrontendMessage{data, &pgproto3.CopyDone{}, fc, &pgproto3.Query{String: "SELECT count(*) FROM rc"}, &pgproto3.Sync{}})},
		{"sync before data, query after CopyDone", slices.Concat(cp, []pgproto3.FrontendMessage{&pgproto3.Sync{}, data, &pgproto3.CopyDone{}, &pgproto3.Query{String: "SELECT count(*) FROM rc"}, &pgproto3.Sync{}})},
		{"failed query then copy", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Query{String: "SELECT 1/0"}, cp[0], cp[1], cp[2], data, &pgproto3.CopyDone{}, &pgproto3.Sync{}, &pgproto3.Query{String: "SELECT count(*) FROM rc"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compareBatch(t, p, "CREATE TEMP TABLE rc(i int)", tc.msgs)
		})
	}
}

// TestBoundaryAtAQueryInsideABatch: failed blocks, portals and FunctionCalls
// across the unit boundary a Query inside a batch makes.
func TestBoundaryAtAQueryInsideABatch(t *testing.T) {
	p := startProxy(t, &testHooks{}, nil)
	q := query
	sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
	cat := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return slices.Concat(parts...) }
	fcDiv0 := []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: 154 /* int4div */, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("1"), []byte("0")}}}
	fcOK := []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: 1251, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}}
	for _, tc := range []struct {
		name  string
		steps [][]pgproto3.FrontendMessage
	}{
		{"block fails at the Query, then extended", [][]pgproto3.FrontendMessage{q("BEGIN"), cat(pbe("SELECT 1"), q("SELECT 1/0"), pbe("SELECT 2"), sync), q("ROLLBACK")}},
		{"block fails at the Query, ROLLBACK as a Query, then extended", [][]pgproto3.FrontendMessage{q("BEGIN"), cat(pbe("SELECT 1"), q("SELECT 1/0"), q("ROLLBACK"), pbe("SELECT 2"), sync)}},
		{"savepoint, fails at the Query, ROLLBACK TO bound", [][]pgproto3.FrontendMessage{q("BEGIN"), q("SAVEPOINT sp"), cat(pbe("SELECT 1"), q("SELECT 1/0"), pbe("ROLLBACK TO sp"), pbe("SELECT 2"), sync), q("COMMIT")}},
		{"failing FunctionCall, then a Query", [][]pgproto3.FrontendMessage{cat(pbe("SELECT 1"), fcDiv0, q("SELECT 2"), pbe("SELECT 3"), sync)}},
		{"failing FunctionCall in a block, then extended", [][]pgproto3.FrontendMessage{q("BEGIN"), cat(pbe("SELECT 1"), fcDiv0, pbe("SELECT 3"), sync), q("ROLLBACK")}},
		{"FunctionCall, then failing extended, then a Query", [][]pgproto3.FrontendMessage{cat(pbe("SELECT 1"), fcOK, pbe("SELECT 1/0"), q("SELECT 2"), sync)}},
		{"BEGIN as a Query mid-batch, then a failing Query, then extended", [][]pgproto3.FrontendMessage{cat(pbe("SELECT 1"), q("BEGIN"), q("SELECT 1/0"), pbe("SELECT 2"), sync), q("ROLLBACK")}},
		{"pgjdbc: Close, BEGIN, failing statement, Close, ROLLBACK", [][]pgproto3.FrontendMessage{
			{&pgproto3.Close{ObjectType: 'P', Name: "C_1"}, &pgproto3.Query{String: "BEGIN"}}, q("SELECT 1/0"),
			{&pgproto3.Close{ObjectType: 'P', Name: "C_2"}, &pgproto3.Query{String: "ROLLBACK"}}}},
		{"unnamed portal after a Query mid-batch", [][]pgproto3.FrontendMessage{cat([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}}, q("SELECT 2"), []pgproto3.FrontendMessage{&pgproto3.Execute{}}, sync)}},
		{"named portal bound before a Query mid-batch in a block", [][]pgproto3.FrontendMessage{q("BEGIN"), cat([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s1", Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: "c1", PreparedStatement: "s1"}}, q("SELECT 2"), []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "c1"}}, sync), q("COMMIT")}},
		{"suspended portal across a Query mid-batch in a block", [][]pgproto3.FrontendMessage{q("BEGIN"), cat([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s2", Query: "SELECT generate_series(1,3)"}, &pgproto3.Bind{DestinationPortal: "c2", PreparedStatement: "s2"}, &pgproto3.Execute{Portal: "c2", MaxRows: 1}}, q("SELECT 2"), []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "c2"}}, sync), q("COMMIT")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compareBatch(t, p, "", tc.steps...)
		})
	}
}

// TestDeadPortalAcrossAQueryInsideABatch: through the proxy only (PostgreSQL
// may crash on these): a portal bound before a Query that fails the
// block, executed after it in the same client batch, is answered 25P02.
func TestDeadPortalAcrossAQueryInsideABatch(t *testing.T) {
	p := startProxy(t, &testHooks{}, nil)
	for _, portal := range []string{"c1", ""} {
		r := dialRaw(t, p.addr, "trustuser")
		r.send(&pgproto3.Query{String: "BEGIN"})
		r.untilReady()
		r.send(&pgproto3.Parse{Name: "s1", Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: "s1"},
			&pgproto3.Query{String: "SELECT 1/0"}, &pgproto3.Execute{Portal: portal}, &pgproto3.Sync{})
		got := r.untilReady() + r.untilReady()
		r.send(&pgproto3.Query{String: "ROLLBACK"})
		got += r.untilReady()
		t.Logf("portal %q:\n%s", portal, got)
		if !strings.Contains(got, "25P02") && !strings.Contains(got, "34000") || strings.Contains(got, "receive error") {
			t.Errorf("portal %q:\n%s", portal, got)
		}
	}
}

// TestFunctionCallKeepsAPendingUnnamedPortal: a FunctionCall ends the
// batch (endBatchAtQuery) but, unlike a Query, leaves the client's
// unnamed portal alive in a block. Without the Sync's bookkeeping of a
// pending unnamed portal (unnamedLater), an Exec of the hooks at the next
// unit went as a simple Query, which dropped that portal: the client's
// Execute of it failed (34000) and its block with it. Found by a review
// of e5956fc; fails without the fix.
func TestFunctionCallKeepsAPendingUnnamedPortal(t *testing.T) {
	p := startProxy(t, execingHooks(), nil)
	fc := &pgproto3.FunctionCall{Function: 1251 /* int4abs */, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}
	for _, tc := range []struct {
		name string
		end  pgproto3.FrontendMessage
	}{
		{"Sync (control)", &pgproto3.Sync{}},
		{"FunctionCall", fc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compareBatch(t, p, "BEGIN",
				[]pgproto3.FrontendMessage{
					&pgproto3.Parse{Name: "s1", Query: "SELECT 42"},
					&pgproto3.Bind{PreparedStatement: "s1"}, // unnamed portal, not executed
					tc.end,
					// next unit: the test hook Execs at its boundary ("probe")
					&pgproto3.Parse{Name: "s2", Query: "SELECT 'exec1'"},
					&pgproto3.Execute{}, // the client's unnamed portal: 42
					&pgproto3.Sync{},
				})
		})
	}
}

// compareBatchAsOn15 is compareBatch where PostgreSQL 18.6 is no
// reference: there a Query inside a batch does not end the batch's
// implicit transaction (its ReadyForQuery says 'T', and the statement
// after the batch fails, XX000: compatibility.md), which Ordo ends as
// PostgreSQL 15 does. On 18 the proxy's transcript must hold want, what
// PostgreSQL 15 answers; on 15 the transcripts are compared.
func compareBatchAsOn15(t *testing.T, p *proxy, want, setup string, steps ...[]pgproto3.FrontendMessage) {
	t.Helper()
	if pgVersion.Major < 18 {
		compareBatch(t, p, setup, steps...)
		return
	}
	if through := batchTranscript(t, p.addr, setup, steps); !strings.Contains(through, want) {
		t.Fatalf("through the proxy, want %s as on PostgreSQL 15 in:\n%s", want, through)
	}
}
