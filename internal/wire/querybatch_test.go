package wire

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// completingHooks answer a Query "NOTIFY ordo_c…" themselves (Completed,
// as the session layer answers a NOTIFY inside a block, or Ordo's kept
// objects): PostgreSQL alone answers it CommandComplete NOTIFY and a
// ReadyForQuery, which is the reference.
type completingHooks struct{ testHooks }

type completingSession struct{ *testSession }

func (h *completingHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	s, err := h.testHooks.NewSession(ctx, info, be)
	if err != nil {
		return nil, err
	}
	return completingSession{s.(*testSession)}, nil
}

func (s completingSession) Statement(ctx context.Context, st *Statement) error {
	if err := s.testSession.Statement(ctx, st); err != nil {
		return err
	}
	if st.Kind == KindQuery && strings.HasPrefix(st.SQL, "NOTIFY ordo_c") {
		return &Completed{Tag: "NOTIFY"}
	}
	return nil
}

// compareBatch sends msgs then a marker Query, directly and through p,
// and fails if the transcripts (up to the marker's ReadyForQuery) differ.
func compareBatch(t *testing.T, p *proxy, setup string, steps ...[]pgproto3.FrontendMessage) {
	t.Helper()
	transcript := func(addr string) string {
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
				if strings.Contains(more, marker) || strings.Contains(more, "25P02") || strings.Contains(more, "receive error") {
					break
				}
			}
		}
		return got
	}
	direct, through := transcript(pg.Addr()), transcript(p.addr)
	if direct != through {
		t.Fatalf("directly:\n%s\nthrough the proxy:\n%s", direct, through)
	}
}

// TestCompletedInsideABatch: a Query the hooks answer themselves
// (Completed) inside an extended-protocol batch ends the batch as
// PostgreSQL's running it would: its ReadyForQuery gives the status
// PostgreSQL has (a BEGIN bound earlier in the batch: 'T', not 'I'), and
// what comes after it no longer shares the batch's implicit transaction
// (an error after it rolled back an insert the client had been told was
// done). Found by a review of e5956fc; each failing case failed before.
func TestCompletedInsideABatch(t *testing.T) {
	p := startProxy(t, &completingHooks{}, nil)
	pbe := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	q := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
	cat := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return slices.Concat(parts...) }

	t.Run("at a boundary (control)", func(t *testing.T) {
		compareBatch(t, p, "", q("NOTIFY ordo_c"))
	})
	t.Run("in a block, inside a batch (control)", func(t *testing.T) {
		compareBatch(t, p, "", q("BEGIN"), cat(pbe("SELECT 1"), q("NOTIFY ordo_c"), pbe("SELECT 1/0"), q("SELECT 2"), sync), q("ROLLBACK"))
	})
	// The batch's BEGIN (bound) makes its implicit transaction a block:
	// PostgreSQL's ReadyForQuery after the Query says 'T'; the hooks'
	// answer says the status of the last ReadyForQuery before the batch.
	t.Run("after a BEGIN bound in the batch", func(t *testing.T) {
		compareBatch(t, p, "", cat(pbe("SELECT 1"), pbe("BEGIN"), q("NOTIFY ordo_c"), sync), q("ROLLBACK"))
	})
	// PostgreSQL commits the batch so far at the Query's end; answered
	// by the hooks, the batch goes on, and a later error of it rolls
	// back what the client was told had ended ('I').
	t.Run("an error after it, outside a block", func(t *testing.T) {
		skipAfterABatchEndingInAQuery(t)
		compareBatch(t, p, "CREATE TEMP TABLE rc(i int)",
			cat(pbe("INSERT INTO rc VALUES (1)"), q("NOTIFY ordo_c"), pbe("SELECT 1/0"), sync),
			q("SELECT count(*) FROM rc"))
	})
	// No Sync after it (the client was answered a ReadyForQuery, as
	// pgjdbc's extendedForPrepared expects): the next Query fails, and
	// PostgreSQL, still in the batch's implicit transaction, rolls back
	// what it would have committed at the first Query.
	t.Run("no Sync after it, then a failing Query", func(t *testing.T) {
		skipAfterABatchEndingInAQuery(t)
		compareBatch(t, p, "CREATE TEMP TABLE rc(i int)",
			cat(pbe("INSERT INTO rc VALUES (1)"), q("NOTIFY ordo_c"), q("SELECT 1/0")),
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
			if strings.Contains(tc.name, "after CopyDone") {
				skipAfterABatchEndingInAQuery(t)
			}
			compareBatch(t, p, "CREATE TEMP TABLE rc(i int)", tc.msgs)
		})
	}
}

// TestBoundaryAtAQueryInsideABatch: failed blocks, portals and FunctionCalls
// across the unit boundary a Query inside a batch makes.
func TestBoundaryAtAQueryInsideABatch(t *testing.T) {
	p := startProxy(t, &testHooks{}, nil)
	pbe := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	q := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
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

// skipAfterABatchEndingInAQuery skips a comparison with PostgreSQL 18,
// whose 18.6 answers the first statement after a batch that ended in a
// Query with XX000 "StartTransactionCommand: unexpected state STARTED"
// and runs it not (compatibility.md): its own transcript is no reference
// there, and PostgreSQL 15 is (make test runs this package on both).
func skipAfterABatchEndingInAQuery(t *testing.T) {
	t.Helper()
	if pgVersion.Major >= 18 {
		t.Skipf("%s fails the statement after a batch that ended in a Query (XX000, compatibility.md); compared on PostgreSQL 15", pgVersion)
	}
}
