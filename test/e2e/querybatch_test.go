package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestCompatQueryInsideABatch: a simple Query (or a FunctionCall) sent
// inside an extended-protocol batch, before its Sync, after an error of
// the batch: PostgreSQL skips it, and through Ordo the session hung (it
// waited for a ReadyForQuery PostgreSQL never sends), answering nothing
// more. Where nothing failed before it, a read runs as on PostgreSQL, and
// what Ordo cannot replicate there is refused with 0A000 and a message
// saying what to do (it was XX000 "wire: not at a transaction boundary"),
// and the transaction state stays the client's.
func TestCompatQueryInsideABatch(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	same(t, o, p, "create table qb(id int primary key)")
	ho, hp := sb.hijacked(t)
	q := simpleQuery
	fail := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	with := batchOf
	for i, st := range [][]pgproto3.FrontendMessage{
		with(fail, q("insert into qb values (1)")),
		q("select count(*) from qb"),
		with(fail, q("begin; insert into qb values (2); commit")),
		q("select count(*) from qb"),
		q("begin"),
		with(fail, q("insert into qb values (3)")),
		q("rollback"),
		with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("select 3")),
		q("insert into qb values (4)"),
		// A Query's own error: PostgreSQL skips nothing after it (its
		// ReadyForQuery ends the batch, as a Sync would). The later
		// Query was dropped, taken for skipped (review).
		with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("select 1/0"), q("select 3")),
		// pgjdbc with preferQueryMode=extendedForPrepared: the Closes of
		// dead portals, then BEGIN as a Query, no Sync; the transaction's
		// statements as Queries. Each one after the BEGIN was refused
		// (0A000, in the batch that BEGIN's ReadyForQuery had ended), and
		// the COMMIT rolled the transaction back.
		{&pgproto3.Close{ObjectType: 'P', Name: "C_1"}, &pgproto3.Query{String: "BEGIN"}},
		q("insert into qb values (8)"),
		q("insert into qb values (9)"),
		q("COMMIT"),
		{&pgproto3.Close{ObjectType: 'P', Name: "C_2"}, &pgproto3.Query{String: "BEGIN"}, &pgproto3.Query{String: "insert into qb values (10)"}, &pgproto3.Query{String: "COMMIT"}},
		q("select count(*) from qb where id >= 8"),
		// The same mode's Closes of a statement that left the driver's
		// cache, then an autocommit write as a Query: it was refused
		// (0A000), as if after a statement of the batch; Closes run
		// nothing, and it runs as on PostgreSQL.
		{&pgproto3.Close{ObjectType: 'S', Name: "S_1"}, &pgproto3.Close{ObjectType: 'P', Name: "C_3"}, &pgproto3.Query{String: "insert into qb values (14)"}},
		{&pgproto3.Close{ObjectType: 'S', Name: "S_2"}, &pgproto3.Query{String: "insert into qb values (15); select 1/0"}},
		// A FunctionCall there too (a review).
		{&pgproto3.Close{ObjectType: 'S', Name: "S_3"}, &pgproto3.FunctionCall{Function: 1397 /* abs(integer) */, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}},
		q("select count(*) from qb where id >= 14"),
		// A BEGIN as a Query after a statement of the batch ran makes the
		// batch's implicit transaction the client's block. Ordo set its
		// isolation level at the next statement, which PostgreSQL refused
		// (25001), and the block failed.
		with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("BEGIN")),
		q("insert into qb values (11)"),
		q("commit"),
		with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("BEGIN"),
			[]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "insert into qb values (12)"}, &pgproto3.Bind{}, &pgproto3.Execute{}}),
		q("commit"),
		with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("BEGIN"), q("insert into qb values (13)"), q("rollback")),
		q("select count(*) from qb where id >= 11"),
	} {
		outO, outP := untilMarker(t, ho, st), untilMarker(t, hp, st)
		require.Equal(t, outP, outO, "step %d: through Ordo and on PostgreSQL", i+1)
	}
	// Where nothing failed, an update there is refused, saying why.
	out := untilMarker(t, ho, with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("insert into qb values (5)")))
	require.Contains(t, out, "0A000")
	require.Contains(t, out, "ordo: this statement cannot be replicated where it stands in its batch")
	require.NotContains(t, out, "XX000")
	// After an update of the batch outside a block (which Ordo runs in a
	// block of its own until the batch's end), PostgreSQL would commit
	// the batch so far at the Query's end: refused, and the batch rolled
	// back. The Query's ReadyForQuery said 'T' (Ordo's block, as the
	// client's), and the client's later statements ran in that block,
	// never committed.
	out = untilMarker(t, ho, with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "insert into qb values (5)"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("select 1")))
	require.Contains(t, out, "0A000 ordo: a simple Query or function call inside an extended-protocol batch")
	require.NotContains(t, out, "Ready T")
	require.NotContains(t, out, "Ready E")
	fc := &pgproto3.FunctionCall{Function: 1397 /* abs(integer) */, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}
	out = untilMarker(t, ho, with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "insert into qb values (5)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, fc}))
	require.Contains(t, out, "0A000 ordo: a simple Query or function call inside an extended-protocol batch")
	require.NotContains(t, out, "Ready T")
	require.Contains(t, untilMarker(t, ho, q("select count(*) from qb where id = 5")), `Row ["0"]`)
	same(t, o, p, "insert into qb values (6)")
	same(t, o, p, "select * from qb order by id")
	sb.c.requireConverged("qb")
}

// simpleQuery is a simple Query of sql, as messages to send.
func simpleQuery(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
}

// batchOf is parts in one batch, ended by a Sync.
func batchOf(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
	return append(slices.Concat(parts...), &pgproto3.Sync{})
}

// executedUnnamed is sql parsed, bound and executed through the unnamed
// statement and portal; boundUnnamed the same without the Execute.
func executedUnnamed(sql string) []pgproto3.FrontendMessage {
	return append(boundUnnamed(sql), &pgproto3.Execute{})
}

func boundUnnamed(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}}
}

// untilMarker sends msgs and a Query of its own, and reads every reply up
// to that Query's ReadyForQuery, however many ReadyForQuery messages
// come before it. PostgreSQL 18.6 fails the first Query after a batch in
// which a Query ran outside a transaction block ("StartTransactionCommand:
// unexpected state STARTED", XX000; 15 does not): that is the marker's
// answer then.
func untilMarker(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage) string {
	t.Helper()
	out := exchange(t, h, append(slices.Clone(msgs), &pgproto3.Query{String: "select 'the-marker'"}))
	for !strings.Contains(out, "the-marker") && !strings.Contains(out, "25P02") && !strings.Contains(out, "XX000 StartTransactionCommand") {
		out += exchange(t, h, nil)
	}
	return out
}

// TestCompatAfterABatchEndingInAQuery: PostgreSQL 18.6 answers the first
// statement after a batch whose last statement before its Sync was a
// simple Query, outside a block, with XX000 ("StartTransactionCommand:
// unexpected state STARTED"; 15 runs it). Whatever comes next, a Query
// or an extended-protocol update, which Ordo wraps in a block of its own,
// or a BEGIN: through Ordo the client hears what PostgreSQL alone would
// say, and the table ends the same on every node and on PostgreSQL.
func TestCompatAfterABatchEndingInAQuery(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	same(t, o, p, "create table qe(id int primary key)")
	ho, hp := sb.hijacked(t)
	batch := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Query{String: "select 3"}, &pgproto3.Sync{}}
	for i, next := range [][]pgproto3.FrontendMessage{
		{&pgproto3.Query{String: "insert into qe values (1)"}},
		{&pgproto3.Parse{Query: "insert into qe values (2)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "begin"}, &pgproto3.Query{String: "insert into qe values (3)"}, &pgproto3.Query{String: "commit"}},
		{&pgproto3.Query{String: "select count(*) from qe"}},
	} {
		st := slices.Concat(batch, next)
		outO, outP := exchangeReplies(t, ho, st), exchangeReplies(t, hp, st)
		require.Equal(t, outP, outO, "step %d: through Ordo and on PostgreSQL", i+1)
	}
	same(t, o, p, "select * from qe order by id")
	sb.c.requireConverged("qe")
}

// exchangeReplies sends msgs and returns the replies up to one
// ReadyForQuery for each Query and Sync among them, as text (none of
// them skipped: no error before a Query inside a batch).
func exchangeReplies(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage) string {
	t.Helper()
	n := 0
	for _, m := range msgs {
		switch m.(type) {
		case *pgproto3.Query, *pgproto3.Sync:
			n++
		}
	}
	out := exchange(t, h, msgs)
	for i := 1; i < n; i++ {
		out += exchange(t, h, nil)
	}
	return out
}

// TestBeginAfterACloseInABatch: pgjdbc's extendedForPrepared sends the
// Close of a dead portal and then BEGIN as a Query, with no Sync between
// them. Nothing of the batch ran before the BEGIN, so its block is begun
// as one at a boundary is, at the level Ordo runs blocks at, whatever
// the unit before it ran (a review suspected the session kept the
// previous unit's state and took the BEGIN for one after a statement).
func TestBeginAfterACloseInABatch(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	h := hijackNode(t, c, 0)
	q := simpleQuery
	level := func() string {
		out := exchange(t, h, q("select current_setting('transaction_isolation')"))
		require.Contains(t, out, "Ready T", out)
		return out
	}
	out := exchange(t, h, q("BEGIN"))
	require.Contains(t, out, "Ready T", out)
	atBoundary := level()
	require.Contains(t, exchange(t, h, q("COMMIT")), "Ready I")
	for i, before := range [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		q("select 2"),
		{&pgproto3.Parse{Name: "s", Query: "select 3"}, &pgproto3.Bind{DestinationPortal: "C_1", PreparedStatement: "s"}, &pgproto3.Execute{Portal: "C_1"}, &pgproto3.Sync{}},
	} {
		exchangeAll(t, h, before)
		out := exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'P', Name: "C_1"}, &pgproto3.Query{String: "BEGIN"}})
		require.Contains(t, out, "Ready T", "case %d: %s", i, out)
		require.Equal(t, atBoundary, level(), "case %d: the block's level", i)
		require.Contains(t, exchange(t, h, q("COMMIT")), "Ready I", "case %d", i)
	}
}

// TestCompatSplitQueryInsideABatch: a query string with transaction
// control among other statements (which Ordo runs as pieces) sent inside
// an extended-protocol batch, before its Sync, after a statement of the
// batch ran. Its first piece runs in the batch's implicit transaction,
// as PostgreSQL runs the string; every piece was taken for one at a
// boundary, and a BEGIN first had its level set where PostgreSQL refused
// it (25001): the client's transaction failed.
func TestCompatSplitQueryInsideABatch(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	same(t, o, p, "create table qs(id int primary key)")
	ho, hp := sb.hijacked(t)
	q := simpleQuery
	read := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	with := batchOf
	for i, st := range [][]pgproto3.FrontendMessage{
		with(read, q("begin; insert into qs values (1); commit")),
		q("select current_setting('transaction_isolation'), count(*) from qs"),
		with(read, q("begin; select current_setting('transaction_isolation'); insert into qs values (2); commit"), read),
		with(read, q("begin; insert into qs values (5)"), read),
		q("commit"),
		with(read, q("begin; insert into qs values (6); rollback")),
		// A read first, outside a block: it runs in the batch's implicit
		// transaction (Ordo cannot open a block of its own there for
		// the string's pieces: it was refused, 0A000).
		with(read, q("select count(*) from qs; commit")),
		with(read, q("select count(*) from qs; commit; insert into qs values (10)")),
		{&pgproto3.Close{ObjectType: 'P', Name: "C_1"}, &pgproto3.Query{String: "begin; insert into qs values (7); commit"}},
		with(read, q("begin; select 1/0; commit")),
		q("rollback"),
		// Inside a block: a NOTIFY, which Ordo answers itself and sends
		// at the commit, first.
		q("begin"),
		q("insert into qs values (8)"),
		with(read, q("notify qs_chan; commit"), read),
		q("begin"),
		with([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "insert into qs values (9)"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, q("notify qs_chan; commit")),
		q("select count(*) from qs"),
	} {
		outO, outP := untilMarker(t, ho, st), untilMarker(t, hp, st)
		require.Equal(t, outP, outO, "step %d: through Ordo and on PostgreSQL", i+1)
	}
	// Statements before its first transaction control other than a
	// plain COMMIT, outside a block: PostgreSQL runs them in the batch's
	// implicit transaction with what the control does (a BEGIN makes it
	// the block, with a SET LOCAL before it and its level; a ROLLBACK
	// undoes them), which pieces cannot follow: refused, saying why, and
	// nothing of the string runs (a review: the block ran at another level
	// than PostgreSQL refused, and the settings differed).
	for _, sql := range []string{
		"select 1; begin isolation level serializable; insert into qs values (20); commit",
		"select 1; set transaction isolation level serializable; commit",
		"set local qs.x = '1'; begin; select current_setting('qs.x', true); commit",
		"select set_config('qs.z', '1', false); rollback",
		"select 1; commit and chain",
	} {
		out := untilMarker(t, ho, with(read, q(sql)))
		require.Contains(t, out, "0A000 ordo: this query string cannot be replicated where it stands in its batch", sql)
		require.Equal(t, 2, strings.Count("\n"+out, "\nComplete "), "only the batch's read and the marker: %s", out)
	}
	require.Contains(t, untilMarker(t, ho, q("select count(*), current_setting('qs.z', true) from qs where id = 20")), `Row ["0" ""]`)
	// Refused before anything of it reached PostgreSQL, the string drops
	// the unnamed statement as any Query does (the same review: its
	// Bind ran the statement again).
	out := untilMarker(t, ho, slices.Concat(read, q("insert into qs values (21); commit"),
		[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}))
	require.Contains(t, out, "0A000")
	require.Contains(t, out, "26000 unnamed prepared statement does not exist")
	// Nothing ran before it in the batch: its block is one begun at a
	// boundary, at Ordo's level (TestBeginAfterACloseInABatch).
	out = untilMarker(t, ho, []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'P', Name: "C_1"}, &pgproto3.Query{String: "begin; select current_setting('transaction_isolation'); commit"}})
	require.Contains(t, out, `Row ["repeatable read"]`)
	// An update first, outside a block, is refused there as a Query of
	// one statement is (TestCompatQueryInsideABatch), and nothing of the
	// string runs.
	out = untilMarker(t, ho, with(read, q("insert into qs values (3); begin; insert into qs values (4); commit")))
	require.Contains(t, out, "0A000 ordo: this query string cannot be replicated where it stands in its batch")
	out = untilMarker(t, ho, with(read, q("insert into qs values (3); commit")))
	require.Contains(t, out, "0A000 ordo: this statement cannot be replicated where it stands in its batch")
	require.Contains(t, untilMarker(t, ho, q("select count(*) from qs where id in (3, 4)")), `Row ["0"]`)
	same(t, o, p, "select * from qs order by id")
	sb.c.requireConverged("qs")
}

// TestCompatCopyAmongPieces: a COPY … FROM STDIN in a query string with
// transaction control after it (psql -c "begin; copy … from stdin;
// commit"). Ordo runs such a string as pieces, and waited for the
// COPY's piece to end before reading the client's data: the session hung
// (a review), and such strings were then refused. The client's data is
// now relayed while the piece waits for it, and the string runs as on
// PostgreSQL, replicated; so does a COPY after the string's last
// transaction control.
func TestCompatCopyAmongPieces(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	same(t, o, p, "create table qc(id int primary key)")
	ho, hp := sb.hijacked(t)
	read := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	// copyThen sends msgs, then each COPY's data once PostgreSQL asks
	// for it.
	copyThen := func(h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage, data ...[]pgproto3.FrontendMessage) string {
		out := ""
		for i, d := range data {
			for strings.Count(out, "CopyInResponse") <= i {
				out += exchangeUntil(t, h, msgs, "CopyInResponse")
				msgs = nil
			}
			if i < len(data)-1 {
				for _, m := range d {
					h.Frontend.Send(m)
				}
				require.NoError(t, h.Frontend.Flush())
			} else {
				out += untilMarker(t, h, d)
			}
		}
		return out
	}
	rows := func(ids ...int) []pgproto3.FrontendMessage {
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, "%d\n", id)
		}
		return []pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte(b.String())}, &pgproto3.CopyDone{}}
	}
	for i, c := range []struct {
		msgs  []pgproto3.FrontendMessage
		data  [][]pgproto3.FrontendMessage
		after string // sent next
	}{
		{simpleQuery("begin; copy qc from stdin; commit"), [][]pgproto3.FrontendMessage{rows(10, 11)}, ""},
		{simpleQuery("copy qc from stdin; commit"), [][]pgproto3.FrontendMessage{rows(12)}, ""},
		{simpleQuery("begin; insert into qc values (1); commit; copy qc from stdin"), [][]pgproto3.FrontendMessage{rows(2)}, ""},
		{simpleQuery("begin; copy qc from stdin; insert into qc values (13); copy qc from stdin; commit"), [][]pgproto3.FrontendMessage{rows(14), rows(18)}, ""},
		// A row PostgreSQL refuses: the rest of the string does not run.
		{simpleQuery("begin; copy qc from stdin; insert into qc values (15); commit"), [][]pgproto3.FrontendMessage{rows(10)}, "rollback"},
		// The client gives up: the block fails, the rest does not run.
		{simpleQuery("begin; copy qc from stdin; commit"), [][]pgproto3.FrontendMessage{{&pgproto3.CopyData{Data: []byte("16\n")}, &pgproto3.CopyFail{Message: "no more"}}}, "rollback"},
		// Inside an extended-protocol batch: PostgreSQL ignores the
		// batch's Sync while it waits for the data.
		{slices.Concat(read, simpleQuery("begin; copy qc from stdin; commit"), []pgproto3.FrontendMessage{&pgproto3.Sync{}}), [][]pgproto3.FrontendMessage{rows(17)}, ""},
	} {
		want := copyThen(hp, c.msgs, c.data...)
		require.Equal(t, want, copyThen(ho, c.msgs, c.data...), "string %d", i+1)
		if c.after != "" {
			require.Equal(t, untilMarker(t, hp, simpleQuery(c.after)), untilMarker(t, ho, simpleQuery(c.after)), "after string %d", i+1)
		}
	}
	// The COPY fails (a row PostgreSQL cannot read) and the client,
	// having seen the error, goes on without ending the COPY, which
	// PostgreSQL allows: it left COPY mode at the error and drops COPY
	// messages. Through Ordo the piece waited for the COPY's end: the
	// client's next message went to PostgreSQL outside the session (an
	// insert unreplicated), and the piece's ReadyForQuery came late
	// (review).
	for i, c := range [][][]pgproto3.FrontendMessage{
		{simpleQuery("begin; copy qc from stdin; commit"), simpleQuery("rollback")},
		{simpleQuery("copy qc from stdin; commit"), simpleQuery("insert into qc values (30)")},
		{simpleQuery("copy qc from stdin; commit"), {&pgproto3.Sync{}, &pgproto3.CopyDone{}}, simpleQuery("insert into qc values (31)")},
	} {
		run := func(h *pgconn.HijackedConn) string {
			out := exchangeUntil(t, h, c[0], "CopyInResponse")
			out += exchangeUntil(t, h, []pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("x\n")}}, "Error")
			return out + untilMarker(t, h, slices.Concat(c[1:]...))
		}
		require.Equal(t, run(hp), run(ho), "failed COPY %d", i+1)
	}
	same(t, o, p, "select array_agg(id order by id) from qc")
	require.Equal(t, "row [\"{1,2,10,11,12,13,14,17,18,30,31}\"]\ntag SELECT 1\nstatus I\n", simple(o.PgConn(), "select array_agg(id order by id) from qc"))
	sb.c.requireConverged("qc")
	// A client that leaves in the middle of such a COPY ends its
	// session (it lingered until the client closed its socket).
	out := exchangeUntil(t, ho, simpleQuery("begin; copy qc from stdin; commit"), "CopyInResponse")
	untilClosed(t, ho, out, &pgproto3.CopyData{Data: []byte("40\n")}, &pgproto3.Terminate{})
}

// untilClosed sends msgs and returns the replies, as text, up to the end
// of the connection, which must come within 30 s (so far: the replies
// before msgs, for the failure's message).
func untilClosed(t *testing.T, h *pgconn.HijackedConn, soFar string, msgs ...pgproto3.FrontendMessage) string {
	t.Helper()
	sendFlushed(t, h, msgs)
	out := ""
	for {
		msg, err := h.Frontend.Receive()
		if err != nil {
			require.NotContains(t, err.Error(), "timeout", "the session did not end: %s", soFar+out)
			return out + "(the connection ended)\n"
		}
		out += replyLine(msg)
	}
}

// exchangeUntil sends msgs and returns the replies, as text, up to the
// first one whose text contains until.
func exchangeUntil(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage, until string) string {
	t.Helper()
	sendFlushed(t, h, msgs)
	out := ""
	for !strings.Contains(out, until) {
		msg, err := h.Frontend.Receive()
		require.NoError(t, err, "so far: %s", out)
		out += replyLine(msg)
	}
	return out
}

// TestCompatSplitLevelAfterAStatement: a query string whose BEGIN asks
// for a level after a statement of the string took a snapshot, at a
// boundary: PostgreSQL refuses the level (25001) and nothing of the
// string commits. Under dbsm Ordo's block for the string runs at
// REPEATABLE READ whatever was asked, so its SET of the level changed
// nothing and the string ran and committed (a review).
func TestCompatSplitLevelAfterAStatement(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm", "dbsm-si"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			sb := startSideBySide(t, protocol)
			o, p := sb.conns(t)
			same(t, o, p, "create table rl(id int primary key)")
			same(t, o, p,
				"select 1; begin isolation level serializable; insert into rl values (1); commit",
				"select 1; begin isolation level read committed; insert into rl values (2); commit",
				"select count(*) from rl")
			sb.c.requireConverged("rl")
		})
	}
}

// TestMessageDuringCopyFromStdin: a client that sends a message other
// than COPY data while PostgreSQL waits for its COPY FROM STDIN's data (a
// protocol violation): PostgreSQL answers 08P01 and ends the session.
// Through Ordo the session waited for the COPY's ReadyForQuery before the
// message, which never came: it hung, answering nothing (a helper's
// review). Nothing of the COPY commits, and the node serves others.
func TestMessageDuringCopyFromStdin(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	same(t, o, p, "create table qv(id int primary key)")
	transcript := func(h *pgconn.HijackedConn, before []pgproto3.FrontendMessage, data bool, violation pgproto3.FrontendMessage) string {
		out := exchangeUntil(t, h, before, "CopyInResponse")
		msgs := []pgproto3.FrontendMessage{violation}
		if data {
			msgs = append([]pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("1\n")}}, msgs...)
		}
		return out + untilClosed(t, h, out, msgs...)
	}
	copyQ := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	for i, c := range []struct {
		before    []pgproto3.FrontendMessage
		data      bool // some data first
		violation pgproto3.FrontendMessage
	}{
		{copyQ("copy qv from stdin"), false, &pgproto3.Query{String: "select 1"}},
		{copyQ("copy qv from stdin"), true, &pgproto3.Query{String: "select 1"}},
		{copyQ("copy qv from stdin"), true, &pgproto3.Parse{Query: "select 1"}},
		{copyQ("begin; copy qv from stdin"), true, &pgproto3.Query{String: "commit"}},
		{copyQ("begin; copy qv from stdin"), false, &pgproto3.Query{String: "commit"}},
	} {
		ho, hp := sb.hijacked(t)
		want, got := transcript(hp, c.before, c.data, c.violation), transcript(ho, c.before, c.data, c.violation)
		require.Contains(t, want, "08P01", "case %d", i+1)
		require.Equal(t, want, got, "case %d: through Ordo and on PostgreSQL", i+1)
	}
	same(t, o, p, "insert into qv values (2)", "select * from qv order by id")
	sb.c.requireConverged("qv")
}

// TestCompatTransactionWarnings: where PostgreSQL runs an implicit
// transaction (a query string's, an extended-protocol batch's) and Ordo
// runs a block of its own to replicate it, transaction control warns as
// PostgreSQL warns: a COMMIT or ROLLBACK there "there is no transaction
// in progress" (Ordo's block ended without it), a BEGIN nothing (Ordo's
// block made PostgreSQL say "there is already a transaction in
// progress"), and a SET LOCAL, SET TRANSACTION or SET CONSTRAINTS in a
// batch "… can only be used in transaction blocks" where PostgreSQL
// takes the batch for no block. The transcripts compare notices
// (exchange), found missing by the session fuzzer once it did.
func TestCompatTransactionWarnings(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	same(t, o, p, "create table tw(id int primary key)", "create table twd(id int primary key deferrable initially deferred)")
	ho, hp := sb.hijacked(t)
	q := simpleQuery
	ins := func(id int) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: fmt.Sprintf("insert into tw values (%d)", id)}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	stmt := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	for i, st := range [][]pgproto3.FrontendMessage{
		q("insert into tw values (1); commit"),
		q("insert into tw values (2); commit; insert into tw values (3)"),
		q("insert into tw values (4); rollback"),
		q("select 1; commit"),
		q("insert into tw values (5); begin; insert into tw values (6); commit"),
		q("set local work_mem = '1MB'; rollback"),
		q("set local work_mem = '1MB'; insert into tw values (7); commit"),
		batchOf(ins(10), stmt("commit")),
		batchOf(ins(11), stmt("rollback")),
		batchOf(ins(12), stmt("begin"), ins(13), stmt("commit")),
		batchOf(ins(14), stmt("start transaction"), ins(15), stmt("commit")),
		batchOf(ins(16), stmt("set local work_mem = '2MB'"), stmt("select current_setting('work_mem')")),
		batchOf(ins(17), stmt("set constraints all deferred")),
		batchOf(ins(18), stmt("set transaction isolation level read committed")),
		// Before an error of the statement, as PostgreSQL's checks come
		// after its warning: the level after a snapshot, a commit that
		// fails (a deferred constraint).
		batchOf(ins(21), stmt("set transaction isolation level serializable")),
		q("insert into twd values (1); insert into twd values (1); commit"),
		batchOf(stmt("insert into twd values (2)"), stmt("insert into twd values (2)"), stmt("commit")),
		// Only parsed before it, the update opens Ordo's block: the SET
		// LOCAL bound first is PostgreSQL's first statement of the batch.
		batchOf([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "tw_ins", Query: "insert into tw values (19)"}},
			stmt("set local work_mem = '3MB'"), []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "tw_ins"}, &pgproto3.Execute{}}),
		q("deallocate tw_ins"),
		// Bound outside the client's block, executed in it (after its
		// BEGIN, in the batch or the next): PostgreSQL warns at the
		// Execute, not at the Bind (a review).
		batchOf(ins(22), []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "set local work_mem = '5MB'"}, &pgproto3.Bind{DestinationPortal: "tw_p"}},
			stmt("begin"), []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "tw_p"}}),
		q("commit"),
		batchOf(ins(23), []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "set local work_mem = '5MB'"}, &pgproto3.Bind{DestinationPortal: "tw_p"}}, stmt("begin")),
		batchOf([]pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "tw_p"}}),
		q("commit"),
		// In the client's own block PostgreSQL warns as usual.
		q("begin"),
		q("begin"),
		batchOf(ins(20), stmt("set local work_mem = '4MB'")),
		q("commit"),
		q("commit"),
		q("select array_agg(id order by id) from tw"),
	} {
		outO, outP := untilMarker(t, ho, st), untilMarker(t, hp, st)
		require.Equal(t, outP, outO, "step %d: through Ordo and on PostgreSQL", i+1)
	}
}

// TestCompatTransactionEndBoundNeverExecuted: an extended-protocol batch
// that updates, then binds a COMMIT or ROLLBACK and never executes it.
// PostgreSQL runs nothing at a Bind, and its Sync commits the implicit
// transaction (or the client's block stays open). The session ended the
// transaction at the Bind (a COMMIT's must be terminated before
// PostgreSQL runs it), and the block Ordo had opened stayed open: the
// client saw ReadyForQuery 'T' and its next autocommit statements ran in
// that block, each told INSERT 0 1, and were never committed or
// replicated (lost when the connection closed); after a ROLLBACK bound
// that way, a COMMIT executed in the same batch committed on this node
// alone. A COMMIT's empty block is now committed at the Sync, and a
// ROLLBACK acts at its Execute, as on PostgreSQL. Two cases still differ
// from PostgreSQL, named in compatibility.md: the transaction a COMMIT
// bound this way terminated stays committed when the client's block is
// then rolled back, or the batch fails after it. Every node ends the
// same in every case, and with the rows wanted.
func TestCompatTransactionEndBoundNeverExecuted(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	q := simpleQuery
	run := executedUnnamed
	ins := func(id int) []pgproto3.FrontendMessage { return run(fmt.Sprintf("insert into te values (%d)", id)) }
	bound := boundUnnamed
	rows := func(c *pgx.Conn) string {
		var got string
		require.NoError(t, c.QueryRow(context.Background(), "select coalesce(array_agg(id order by id), '{}')::text from te").Scan(&got))
		return got
	}
	for i, sc := range []struct {
		steps [][]pgproto3.FrontendMessage
		// asPostgreSQL: every reply as on PostgreSQL; want: the rows
		// (PostgreSQL's where they are as on PostgreSQL).
		asPostgreSQL bool
		want         string
	}{
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit")), q("insert into te values (2)"), batchOf(ins(3))}, asPostgreSQL: true, want: "{1,2,3}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit")), q("begin"), q("insert into te values (2)"), q("commit")}, asPostgreSQL: true, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit"), ins(2)), q("insert into te values (3)")}, asPostgreSQL: true, want: "{1,2,3}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit"), bound("select 1")), q("insert into te values (2)")}, asPostgreSQL: true, want: "{1,2}"},
		// A BEGIN bound and not executed leaves the block Ordo's (a
		// review).
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("begin"), bound("commit")), q("insert into te values (2)")}, asPostgreSQL: true, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit"), ins(2)), q("insert into te values (3); begin"), q("insert into te values (4)"), q("rollback")}, asPostgreSQL: true, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("rollback")), q("insert into te values (2)")}, asPostgreSQL: true, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("rollback"), run("commit")), q("insert into te values (2)")}, asPostgreSQL: true, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("rollback"), run("rollback")), q("insert into te values (2)")}, asPostgreSQL: true, want: "{2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("rollback"), ins(2)), q("insert into te values (3)")}, asPostgreSQL: true, want: "{1,2,3}"},
		{steps: [][]pgproto3.FrontendMessage{q("begin"), batchOf(ins(1), bound("rollback")), q("commit")}, asPostgreSQL: true, want: "{1}"},
		{steps: [][]pgproto3.FrontendMessage{q("begin"), batchOf(ins(1), bound("rollback"), run("commit")), q("insert into te values (2)")}, asPostgreSQL: true, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{q("begin"), batchOf(ins(1), bound("rollback"), ins(2)), batchOf(run("rollback"))}, asPostgreSQL: true, want: "{}"},
		// A ROLLBACK bound into a named portal in one batch and executed
		// first in the next, before an update (a review).
		{steps: [][]pgproto3.FrontendMessage{q("begin"), q("insert into te values (1)"),
			batchOf([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "te_r", Query: "rollback"}, &pgproto3.Bind{DestinationPortal: "te_p", PreparedStatement: "te_r"}}),
			batchOf([]pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "te_p"}}, ins(2)), q("insert into te values (3)")}, asPostgreSQL: true, want: "{2,3}"},
		// Named in compatibility.md: committed at the Bind, where
		// PostgreSQL then rolls it back (the client's block, a failed
		// batch).
		{steps: [][]pgproto3.FrontendMessage{q("begin"), batchOf(ins(1), bound("commit")), q("rollback")}, want: "{1}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit"), ins(1)), q("insert into te values (2)")}, want: "{1,2}"},
		{steps: [][]pgproto3.FrontendMessage{batchOf(ins(1), bound("commit"), run("begin")), q("insert into te values (2)"), q("rollback")}, want: "{1}"},
	} {
		same(t, o, p, "drop table if exists te", "create table te(id int primary key)")
		ho, hp := sb.hijacked(t)
		for j, st := range sc.steps {
			outO, outP := untilMarker(t, ho, st), untilMarker(t, hp, st)
			if sc.asPostgreSQL {
				require.Equal(t, outP, outO, "case %d step %d: through Ordo and on PostgreSQL", i+1, j+1)
			} else {
				require.Equal(t, strings.Contains(outP, "Ready T"), strings.Contains(outO, "Ready T"), "case %d step %d: a block open as on PostgreSQL", i+1, j+1)
			}
		}
		// Closing the connections ends what they left open.
		ho.Conn.Close()
		hp.Conn.Close()
		if sc.asPostgreSQL {
			require.Equal(t, sc.want, rows(p), "case %d: the rows on PostgreSQL", i+1)
		}
		require.Eventually(t, func() bool { return rows(o) == sc.want }, 5*time.Second, 50*time.Millisecond, "case %d: the rows through Ordo, %s", i+1, rows(o))
		sb.c.requireConverged("te")
	}
}

// TestCompatSavepointControlAtItsExecute: ROLLBACK, ROLLBACK AND CHAIN,
// SAVEPOINT, RELEASE and ROLLBACK TO bound into a portal act where
// PostgreSQL runs them, at the portal's Execute: bound and never
// executed, they do nothing; executed after statements bound later, they
// act after those. Each case compares every reply with PostgreSQL's, and
// the rows and the roles (whose statements nothing but the session's
// record of savepoints keeps from replaying) of every node with
// PostgreSQL's.
func TestCompatSavepointControlAtItsExecute(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	q := simpleQuery
	run, bound := executedUnnamed, boundUnnamed
	ins := func(id int) []pgproto3.FrontendMessage { return run(fmt.Sprintf("insert into ts values (%d)", id)) }
	// boundAs binds sql into portal, under statement name portal.
	boundAs := func(portal, sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Name: portal, Query: sql}, &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: portal}}
	}
	exec := func(portal string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: portal}}
	}
	const rowsSQL = "select coalesce(array_agg(id order by id), '{}')::text from ts"
	// (Each case's roles are its own: zsp and its number.)
	const rolesSQL = "select coalesce(array_agg(rolname order by rolname), '{}')::text from pg_roles where rolname like 'zsp%d'"
	read := func(t *testing.T, c *pgx.Conn, sql string) string {
		var got string
		require.NoError(t, c.QueryRow(context.Background(), sql).Scan(&got))
		return got
	}
	nodes := []*pgx.Conn{sb.c.direct(0), sb.c.direct(1), sb.c.direct(2)}
	for i, steps := range [][][]pgproto3.FrontendMessage{
		// ROLLBACK TO bound and never executed: the role stays.
		{q("begin"), q("savepoint a"), q("create role zsp1"), batchOf(bound("rollback to savepoint a")), q("commit")},
		// RELEASE bound and never executed: the savepoint is still
		// there for the ROLLBACK TO, which undoes the role.
		{q("begin"), q("savepoint a"), q("create role zsp2"), batchOf(bound("release savepoint a")), q("rollback to savepoint a"), q("commit")},
		// ROLLBACK AND CHAIN bound and never executed: the COMMIT after
		// it commits the role.
		{q("begin"), q("create role zsp3"), batchOf(bound("rollback and chain"), run("commit"))},
		// SAVEPOINT bound before the role's statement and executed after
		// it: the ROLLBACK TO keeps the role.
		{q("begin"), batchOf(boundAs("sp4", "savepoint b"), run("create role zsp4"), exec("sp4")), q("rollback to savepoint b"), q("commit")},
		// A ROLLBACK bound outside any transaction, executed after an
		// update of its batch: it rolls the update back; the next one
		// commits at the Sync.
		{batchOf(boundAs("rb5", "rollback"), ins(1), exec("rb5"), ins(2))},
		// A ROLLBACK TO bound in a failed block, executed first in the
		// next batch: the block goes on there, and a savepoint set after
		// it is one (the ROLLBACK TO it undoes the role).
		{q("begin"), q("savepoint a"), q("insert into ts values (3)"), q("select 1/0"), batchOf(boundAs("rt6", "rollback to savepoint a")),
			batchOf(exec("rt6"), ins(4), run("savepoint b"), run("create role zsp6"), run("rollback to savepoint b")), q("commit")},
		// The same with a ROLLBACK AND CHAIN of a failed block: the rest
		// of the batch is the new block's.
		{q("begin"), q("insert into ts values (5)"), q("select 1/0"), batchOf(boundAs("rc7", "rollback and chain")),
			batchOf(exec("rc7"), ins(6), run("savepoint b"), run("create role zsp7"), run("rollback to savepoint b")), q("commit")},
		// A SAVEPOINT's portal executed, a ROLLBACK TO it, then the
		// portal executed again: PostgreSQL runs a portal once (55000),
		// and the last ROLLBACK TO undoes the role (a review of the first
		// version: the cut log forgot that it ran).
		{q("begin"), batchOf(boundAs("sp8", "savepoint b")), batchOf(exec("sp8")), q("rollback to savepoint b"),
			q("create role zsp8"), batchOf(exec("sp8")), q("rollback to savepoint b"), q("commit")},
		// A Query drops the unnamed portal: the RELEASE bound there never
		// runs, and the ROLLBACK TO undoes the role (the same review).
		{q("begin"), q("savepoint a"), q("create role zsp9"), batchOf(bound("release savepoint a")), q("select 1"),
			batchOf(exec("")), q("rollback to savepoint a"), q("commit")},
	} {
		t.Run(fmt.Sprint("case", i+1), func(t *testing.T) {
			same(t, o, p, "drop table if exists ts", "create table ts(id int primary key)")
			ho, hp := sb.hijacked(t)
			defer ho.Conn.Close()
			defer hp.Conn.Close()
			for j, st := range steps {
				outO, outP := untilMarker(t, ho, st), untilMarker(t, hp, st)
				require.Equal(t, outP, outO, "step %d: through Ordo and on PostgreSQL", j+1)
			}
			ho.Conn.Close()
			hp.Conn.Close()
			sb.c.requireConverged("ts")
			roles := fmt.Sprintf(rolesSQL, i+1)
			wantRows, wantRoles := read(t, p, rowsSQL), read(t, p, roles)
			for n, c := range nodes {
				require.Equal(t, wantRows, read(t, c, rowsSQL), "node %d's rows, against PostgreSQL's", n+1)
				require.Equal(t, wantRoles, read(t, c, roles), "node %d's roles, against PostgreSQL's", n+1)
			}
		})
	}
}
