package e2e

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestCompatCommitAfterOtherStatementsOfABatch: a COMMIT sent after other
// statements of one extended-protocol batch, before its Sync (psycopg's
// pipeline, pgjdbc's batches and autosave, pgx's SendBatch of begin …
// commit) commits and is replicated as PostgreSQL commits it; an error
// before it, or at it (a deferred constraint), reaches the client as
// PostgreSQL raises it, and what follows it in the batch runs as on
// PostgreSQL. Replies are compared message by message with a plain
// server's. (Also: a BEGIN that is parsed but not executed begins
// nothing; an update after it was committed on one node only.)
func TestCompatCommitAfterOtherStatementsOfABatch(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm")
	ctx := context.Background()
	o, p := sb.conns(t)
	same(t, o, p,
		"create table pc(id int primary key, v text)",
		"create table pcref(id int primary key, parent int references pcref(id) deferrable initially deferred)",
	)
	ho, hp := sb.hijacked(t)
	ext := func(name, sql string, params ...string) []pgproto3.FrontendMessage {
		var ps [][]byte
		for _, v := range params {
			ps = append(ps, []byte(v))
		}
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: sql},
			&pgproto3.Bind{PreparedStatement: name, Parameters: ps}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}
	}
	batch := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
		var msgs []pgproto3.FrontendMessage
		for _, p := range parts {
			msgs = append(msgs, p...)
		}
		return append(msgs, &pgproto3.Sync{})
	}
	sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
	for _, tc := range []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		// psycopg: with conn.pipeline(): conn.execute(insert); conn.commit()
		{"begin", batch(ext("", "begin"))},
		{"insert, commit", batch(ext("", "insert into pc values (1, 'a')"), ext("", "commit"))},
		// All of it in one batch, and statements after the COMMIT: a new
		// implicit transaction.
		{"begin, insert, commit, insert", batch(ext("", "begin"), ext("", "insert into pc values (2, 'b')"),
			ext("", "commit"), ext("", "insert into pc values (3, 'c')"))},
		{"begin, select, update, commit (named), select", batch(ext("", "begin"), ext("s1", "select count(*) from pc"),
			ext("", "update pc set v = 'bb' where id = $1", "2"), ext("c1", "commit"), ext("", "select v from pc order by id"),
			[]pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "s1"}, &pgproto3.Close{ObjectType: 'S', Name: "c1"}})},
		// The COMMIT parsed as the unnamed statement in an earlier batch,
		// bound after other statements.
		{"parse commit", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "commit"}})},
		{"begin, insert, bind unnamed commit", batch(ext("b", "begin"), ext("i", "insert into pc values (4, 'd')"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{},
				&pgproto3.Close{ObjectType: 'S', Name: "b"}, &pgproto3.Close{ObjectType: 'S', Name: "i"}})},
		// An error before the COMMIT: PostgreSQL skips it, the block stays
		// failed.
		{"begin, duplicate, commit", batch(ext("", "begin"), ext("", "insert into pc values (5, 'e')"),
			ext("", "insert into pc values (1, 'dup')"), ext("", "commit"), ext("", "insert into pc values (6, 'f')"))},
		{"in the failed block: select", batch(ext("", "select 1"))},
		{"rollback", batch(ext("", "rollback"))},
		// An error at the COMMIT: a deferred foreign key.
		{"begin, violate deferred key, commit", batch(ext("", "begin"), ext("", "insert into pcref values (1, 99)"),
			ext("", "commit"), ext("", "insert into pc values (7, 'g')"))},
		{"after it", batch(ext("", "select count(*) from pcref"))},
		// No BEGIN: the COMMIT ends the batch's implicit transaction.
		{"insert, commit (implicit)", batch(ext("", "insert into pc values (8, 'h')"), ext("", "commit"))},
		{"select, insert, commit (implicit)", batch(ext("", "select 1"), ext("", "insert into pc values (9, 'i')"), ext("", "commit"))},
		// COMMIT AND CHAIN after other statements.
		{"begin, insert, commit and chain, insert", batch(ext("", "begin"), ext("", "insert into pc values (10, 'j')"),
			ext("", "commit and chain"), ext("", "insert into pc values (11, 'k')"))},
		{"commit", batch(ext("", "commit"))},
		// A failed block that a ROLLBACK TO restores, committed in the
		// same batch.
		{"begin, insert, savepoint", batch(ext("", "begin"), ext("", "insert into pc values (13, 'm')"), ext("", "savepoint s"))},
		{"fail", batch(ext("", "select 1/0"))},
		{"rollback to, commit", batch(ext("", "rollback to savepoint s"), ext("", "commit"))},
		// What follows a COMMIT in its batch sees what it committed (it
		// conflicted with it).
		{"insert, commit, delete (implicit)", batch(ext("", "insert into pc values (14, 'n')"), ext("", "commit"),
			ext("", "delete from pc where id = $1", "14"))},
		// The unnamed statement PostgreSQL holds, not the last one the
		// client parsed (skipped after an error), bound in an implicit
		// transaction.
		{"parse rollback to", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "rollback to savepoint s"}})},
		{"fail, parse select", batch(ext("f", "select 1/0"), []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 1"}})},
		{"insert, bind unnamed", batch(ext("i2", "insert into pc values (15, 'o')"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}})},
		// A COMMIT parsed as the unnamed statement, which a simple query
		// then destroys: binding it after an insert fails, and the
		// insert is rolled back.
		{"parse commit again", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "commit"}})},
		{"a query", []pgproto3.FrontendMessage{&pgproto3.Query{String: "select 1"}}},
		{"insert, bind the destroyed commit", batch(ext("i3", "insert into pc values (16, 'p')"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}})},
		// A BEGIN bound and never executed (its portal replaced): the
		// insert runs in PostgreSQL's implicit transaction, which the
		// COMMIT ends (review of SyncHere: its Sync committed it on node
		// 1 alone).
		{"select, begin bound only, insert, commit", batch(ext("", "select 1"),
			[]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin"}, &pgproto3.Bind{}},
			ext("", "insert into pc values (17, 'q')"), ext("", "commit"))},
		// A BEGIN after other statements of the implicit transaction
		// makes it the client's block; its level is set by then (it was
		// rewritten to REPEATABLE READ and failed: 25001, found by the
		// session fuzzer).
		{"select, begin, insert, commit", batch(ext("", "select 1"), ext("", "begin"),
			ext("", "insert into pc values (20, 't')"), ext("", "commit"))},
		{"delete, begin", batch(ext("", "delete from pc where id = $1", "20"), ext("", "begin"))},
		{"commit after it", batch(ext("", "commit"))},
		// Only parsed before it: PostgreSQL took a snapshot to parse the
		// SELECT, which fixes the level as well.
		{"parse select, begin", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select count(*) from pc"}}, ext("", "begin"))},
		{"commit after that", batch(ext("", "commit"))},
		// A named BEGIN parsed at a boundary, bound after a statement.
		{"parse named begin", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "nb", Query: "begin"}})},
		{"select, bind named begin, commit", batch(ext("", "select 1"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "nb"}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "nb"}},
			ext("", "commit"))},
		// The unnamed BEGIN parsed first in its batch, bound after a
		// statement ran: Ordo rewrote it with its isolation level at the
		// Parse, where nothing had run, and PostgreSQL refused the level
		// at the Bind (25001; the session fuzzer, seed
		// 1796161711157417662). An insert or a read in between; and a
		// block opened in between, where PostgreSQL refuses another
		// level too.
		{"parse unnamed begin, insert, bind it", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "start transaction"}},
			ext("i6", "insert into pc values (80, 'ab') on conflict (id) do update set v = excluded.v"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "i6"}})},
		{"commit it", batch(ext("", "commit"))},
		{"parse unnamed begin, select, bind it", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin"}},
			ext("s6", "select count(*) from pc"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s6"}},
			ext("u6", "update pc set v = 'ac' where id = 80"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "u6"}})},
		{"commit that", batch(ext("", "commit"))},
		{"parse unnamed begin, begin (named), select, bind it", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin isolation level serializable"}},
			ext("b6", "begin"), ext("s7", "select count(*) from pc"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{},
				&pgproto3.Close{ObjectType: 'S', Name: "b6"}, &pgproto3.Close{ObjectType: 'S', Name: "s7"}})},
		{"the block goes on", batch(ext("", "update pc set v = 'ad' where id = 80"), ext("", "commit"))},
		// Bound again in a batch of its own, nothing run before it: the
		// level is set again.
		{"parse unnamed begin again", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin isolation level serializable"}})},
		{"bind it first", batch([]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}},
			ext("", "select count(*) from pc"), ext("", "show transaction_isolation"), ext("", "commit"))},
		// The review's cases: in Ordo's own block for an autocommit
		// write, the rewritten level is the block's (the client's
		// would fail, 25001); the parameter types the client declared
		// stay (a Bind with too many parameters, or too few); a
		// re-parse PostgreSQL skipped after an error is tried again.
		{"rollback before them", batch(ext("", "rollback"))},
		{"parse unnamed begin read committed", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin isolation level read committed"}})},
		{"insert (named), bind it", batch(ext("u8", "insert into pc values (81, 'ae')"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "u8"}})},
		{"commit the insert", batch(ext("", "commit"))},
		{"parse unnamed begin with a type", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin", ParameterOIDs: []uint32{23}}})},
		{"select, bind it with a parameter", batch(ext("s9", "select 1"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Describe{ObjectType: 'S'},
				&pgproto3.Close{ObjectType: 'S', Name: "s9"}})},
		{"rollback that", batch(ext("r9", "rollback"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "r9"}})},
		{"parse unnamed begin with a type again", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin", ParameterOIDs: []uint32{23}}})},
		{"select, bind it without", batch(ext("s10", "select 1"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s10"}})},
		{"parse unnamed begin, fail before binding it", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "start transaction"}},
			ext("f11", "select 1/0"), []pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}})},
		{"select, bind it once more", batch(ext("s11", "select 1"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s11"},
				&pgproto3.Close{ObjectType: 'S', Name: "f11"}})},
		{"rollback it", batch(ext("r11", "rollback"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "r11"}})},
		// Bound in a failed block: PostgreSQL refuses it (25P02), and
		// would refuse to parse it again there (the session fuzzer's
		// seed 1796168281970492786 under dbsm-si found Ordo's Parse
		// failing there, then an Exec of its own ending the batch).
		{"unnamed begin, fail", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "start transaction"}, &pgproto3.Bind{}, &pgproto3.Execute{}},
			ext("f7", "do $$ begin execute 'prepare f7 as select 1'; end $$"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "f7"}})},
		{"bind it in the failed block", batch([]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}})},
		{"rollback the failed block", batch(ext("r7", "rollback"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "r7"},
			&pgproto3.Close{ObjectType: 'S', Name: "f7"}})},
		// The unnamed BEGIN PostgreSQL holds, rewritten with Ordo's level,
		// where the client's later Parse was skipped after an error:
		// bound in the next batch it is the client's BEGIN, whose level
		// a SHOW reports (the session fuzzer, seed 1796173496328532457:
		// Ordo took its own text for the client's, and said repeatable
		// read).
		{"parse unnamed begin, fail, parse another", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin"}},
			ext("f12", "select 1/0"), []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 2"}})},
		{"bind the begin, show the level", batch([]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}},
			ext("", "show transaction_isolation"))},
		{"rollback the begin", batch(ext("", "rollback"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "f12"}})},
		// A rewritten unnamed BEGIN naming another level, bound first in
		// its batch inside a block whose snapshot an earlier batch took:
		// PostgreSQL refuses the level (25001), and so does Ordo (it
		// bound its own text, asking for the level already set: review).
		{"parse unnamed begin serializable", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin isolation level serializable"}})},
		{"named begin, select", batch(ext("b13", "begin"), ext("s13", "select 1"),
			[]pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "b13"}, &pgproto3.Close{ObjectType: 'S', Name: "s13"}})},
		{"bind the begin first", batch([]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}})},
		{"rollback that block", batch(ext("", "rollback"))},
		// What follows a COMMIT in its batch sees what it committed, its
		// certification too, though the commit was answered before it
		// was visible (the session fuzzer, seed 1796171387262507541: the
		// update conflicted with the insert its own COMMIT committed).
		{"begin, insert 91", []pgproto3.FrontendMessage{&pgproto3.Query{String: "begin; insert into pc values (91, 'af')"}}},
		{"commit, update 91", batch(ext("", "commit"), ext("", "update pc set v = 'ag' where id = 91"))},
		{"begin, insert 92", []pgproto3.FrontendMessage{&pgproto3.Query{String: "begin; insert into pc values (92, 'ah')"}}},
		{"commit, select 92, update 92", batch(ext("", "commit"), ext("", "select v from pc where id = 92"),
			ext("", "update pc set v = 'ai' where id = 92"))},
		// COMMIT AND CHAIN ends no implicit transaction: PostgreSQL
		// refuses it there.
		{"insert, commit and chain (implicit)", batch(ext("", "insert into pc values (18, 'r')"), ext("", "commit and chain"))},
		{"select, insert, commit and chain (implicit)", batch(ext("", "select 1"), ext("", "insert into pc values (19, 's')"),
			ext("", "commit and chain"))},
		// pgjdbc's shape (a Close first) in a failed block: the COMMIT
		// rolls back.
		{"begin, insert", batch(ext("", "begin"), ext("", "insert into pc values (30, 'z')"))},
		{"fail the block", batch(ext("", "select 1/0"))},
		{"close, commit in the failed block", batch([]pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "nosuch"}},
			ext("", "commit"))},
		// The unnamed statement PostgreSQL holds, bound by a unit that
		// begins with a message the hooks do not see (a Describe).
		{"parse commit 3", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "commit"}})},
		{"fail, parse select 3", batch(ext("f3", "select 1/0"), []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 1"}})},
		{"describe, begin, insert (named), bind the unnamed commit", batch([]pgproto3.FrontendMessage{&pgproto3.Describe{ObjectType: 'S'}},
			ext("b3", "begin"), ext("i4", "insert into pc values (40, 'aa')"),
			[]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{},
				&pgproto3.Close{ObjectType: 'S', Name: "b3"}, &pgproto3.Close{ObjectType: 'S', Name: "i4"}})},
		// After an error earlier in its batch, the COMMIT's boundary
		// (Ordo's own messages, skipped) leaves the unnamed statement
		// known: bound later, the insert it holds is replicated.
		{"parse unnamed insert", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "insert into pc values ($1, 'w')"}})},
		{"begin (named)", batch(ext("b5", "begin"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "b5"}})},
		{"fail, commit (named)", batch(ext("f5", "select 1/0"), ext("c5", "commit"))},
		{"rollback (named)", batch(ext("r5", "rollback"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "r5"},
			&pgproto3.Close{ObjectType: 'S', Name: "f5"}, &pgproto3.Close{ObjectType: 'S', Name: "c5"}})},
		{"bind the unnamed insert", batch([]pgproto3.FrontendMessage{&pgproto3.Bind{Parameters: [][]byte{[]byte("60")}}, &pgproto3.Execute{}})},
		// A ROLLBACK that PostgreSQL skips after an error earlier in its
		// batch ends nothing: a ROLLBACK TO later restores the block, and
		// its COMMIT is certified as the transaction it is (the session
		// had forgotten it, and certified it against snapshot seqno 0:
		// it conflicted with the delete before it began).
		{"insert 70", []pgproto3.FrontendMessage{&pgproto3.Query{String: "insert into pc values (70, 'k')"}}},
		{"delete 70", []pgproto3.FrontendMessage{&pgproto3.Query{String: "delete from pc where id = 70"}}},
		{"begin, insert 70, savepoint", batch(ext("", "begin"), ext("", "insert into pc values (70, 'k2')"), ext("", "savepoint s2"))},
		{"fail, rollback (skipped)", batch(ext("", "select 1/0"), ext("", "rollback"))},
		{"rollback to s2", batch(ext("", "rollback to savepoint s2"))},
		{"commit after the skipped rollback", batch(ext("", "commit"))},
		// A BEGIN parsed and never executed starts nothing: the update
		// after it commits at the Sync, and is replicated.
		{"parse begin, update", batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin"}},
			ext("", "update pc set v = 'aa' where id = 1"))},
		// A Sync alone, and a pipelined second unit.
		{"sync", sync},
		{"begin; insert, commit; select", append(batch(ext("", "begin")), append(batch(ext("", "insert into pc values (12, 'l')"),
			ext("", "commit")), batch(ext("", "select count(*) from pc"))...)...)},
	} {
		want := exchangeAll(t, hp, tc.msgs)
		got := exchangeAll(t, ho, tc.msgs)
		require.Equal(t, want, got, "%s: through Ordo and on PostgreSQL", tc.name)
	}

	// A block the client began (by name) before the unnamed BEGIN it had
	// parsed is bound, no snapshot taken yet: Ordo's level stays, where
	// PostgreSQL alone would take the one the client's BEGIN names
	// (compatibility.md: every block runs at REPEATABLE READ).
	exchangeAll(t, ho, batch([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin isolation level read committed"}}))
	exchangeAll(t, ho, batch(ext("b12", "begin isolation level repeatable read"), []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "b12"}}))
	out := exchangeAll(t, ho, batch([]pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}},
		ext("", "select current_setting('transaction_isolation')"), ext("", "rollback")))
	require.Contains(t, out, `Row ["repeatable read"]`, out)

	// The error of an earlier message has come back before the COMMIT
	// or ROLLBACK is sent (the client flushed and read it): PostgreSQL
	// skips every message after it, a Flush too, and Ordo must not wait
	// for their replies (it did, for good).
	for _, end := range []string{"commit", "rollback"} {
		var outs [2]string
		for i, h := range []*pgconn.HijackedConn{hp, ho} {
			outs[i] = exchangeAll(t, h, batch(ext("", "begin")))
			for _, m := range append(ext("", "select 1/0"), &pgproto3.Flush{}) {
				h.Frontend.Send(m)
			}
			require.NoError(t, h.Frontend.Flush())
			for {
				msg, err := h.Frontend.Receive()
				require.NoError(t, err)
				if _, ok := msg.(*pgproto3.ErrorResponse); ok {
					break
				}
			}
			outs[i] += exchangeAll(t, h, batch(ext("", "select 2"), ext("", end)))
			outs[i] += exchangeAll(t, h, batch(ext("", "rollback")))
		}
		require.Equal(t, outs[0], outs[1], "%s after an error already answered: through Ordo and on PostgreSQL", end)
	}

	// A COMMIT bound while an earlier portal waits for its Execute would
	// destroy that portal when Ordo ends the transaction: refused, and
	// nothing is committed.
	out = exchangeAll(t, ho, append(batch(ext("", "begin")), batch([]pgproto3.FrontendMessage{
		&pgproto3.Parse{Name: "p1", Query: "insert into pc values (50, 'bb')"},
		&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "p1"},
		&pgproto3.Parse{Query: "commit"}, &pgproto3.Bind{},
		&pgproto3.Execute{Portal: "p1"}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "p1"}})...))
	require.Contains(t, out, "Error ERROR 0A000 ordo: this COMMIT cannot be replicated where it stands in its batch", out)
	require.Contains(t, exchangeAll(t, ho, batch(ext("", "rollback"))), "Complete ROLLBACK")

	// pgx: a batch that begins and commits.
	for _, conn := range []*pgx.Conn{o, p} {
		b := &pgx.Batch{}
		b.Queue("begin")
		b.Queue("insert into pc values ($1, $2)", 20, "x")
		b.Queue("update pc set v = 'xx' where id = 20")
		b.Queue("commit")
		b.Queue("insert into pc values ($1, $2)", 21, "y")
		require.NoError(t, conn.SendBatch(ctx, b).Close())
	}
	same(t, o, p, "select * from pc order by id", "select * from pcref order by id")
	sb.c.waitConverged()
	for _, table := range []string{"pc", "pcref"} {
		want := sb.c.checksum(0, table)
		for i := 1; i < 3; i++ {
			require.Equal(t, want, sb.c.checksum(i, table), "%s on node %d", table, i+1)
		}
	}
	require.Zero(t, sb.c.unreplicated(0))
}

// exchangeAll sends msgs and returns the replies up to the ReadyForQuery
// of every Sync among them, as text.
func exchangeAll(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage) string {
	t.Helper()
	syncs := 0
	for _, m := range msgs {
		if _, ok := m.(*pgproto3.Sync); ok {
			syncs++
		}
	}
	out := exchange(t, h, msgs)
	for i := 1; i < syncs; i++ {
		out += exchange(t, h, nil)
	}
	return out
}

// hijackNode opens a connection to node i of c whose messages the test
// sends and reads itself (exchange).
func hijackNode(t *testing.T, c *cluster, i int) *pgconn.HijackedConn {
	t.Helper()
	return hijackDSN(t, c.dsn(i))
}

// hijackDSN opens a connection to dsn whose messages the test sends and
// reads itself (exchange).
func hijackDSN(t *testing.T, dsn string) *pgconn.HijackedConn {
	t.Helper()
	pc, err := pgconn.Connect(context.Background(), dsn)
	require.NoError(t, err)
	h, err := pc.Hijack()
	require.NoError(t, err)
	t.Cleanup(func() { h.Conn.Close() })
	return h
}
