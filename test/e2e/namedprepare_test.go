package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestNamedPrepareKeepsOrdosBeginOutOfTheClientsUnit: the BEGIN Ordo
// wraps an update in goes ahead of a named statement's Parse in a round
// trip of its own, not in the client's unit. In the client's unit it
// counted toward the client's statement_timeout, and a timeout just after
// the Parse left the statement in PostgreSQL while pgx heard that its
// prepare had failed: every later Parse of that name failed with 42P05
// (TestStatementTimeoutIsTheClientsOwn, once in CI on PostgreSQL 18).
// PostgreSQL's statement log shows where the BEGIN went: `execute
// ordo_begin` is the one sent in the client's unit.
func TestNamedPrepareKeepsOrdosBeginOutOfTheClientsUnit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, "CREATE TABLE np (id int PRIMARY KEY)")
	require.NoError(t, err)
	prepared := statementLog(t, c, conn, func() {
		_, err = conn.Prepare(ctx, "np_insert", "INSERT INTO np VALUES ($1)")
		require.NoError(t, err)
	})
	require.Contains(t, prepared, "BEGIN ISOLATION LEVEL REPEATABLE READ", "the prepare is wrapped")
	require.NotContains(t, prepared, "execute ordo_begin", "Ordo's BEGIN in the client's unit")
	// The statement runs as usual (its BEGIN may travel with its Bind:
	// a timeout there leaves no statement behind).
	_, err = conn.Exec(ctx, "np_insert", 1)
	require.NoError(t, err)
	c.waitConverged()
	var n int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT count(*) FROM np").Scan(&n))
	require.Equal(t, 1, n)
}

// TestNamedBeginsLevelTravelsWithTheFirstStatement: a BEGIN the client
// prepared under a name (pgbench -M prepared, drivers that prepare what
// they repeat) is not rewritten, so Ordo sets the level it runs the block
// at before the block's first statement. That SET TRANSACTION goes in the
// statement's own round trip, just ahead of its Bind, as `execute
// ordo_begin` in PostgreSQL's statement log; it used to cost a round trip
// of its own (`statement: SET TRANSACTION …`), about 0.2 ms per
// transaction at one client on the development machine; ahead of a named
// statement's Parse it still does. The block runs at the level all the
// same, and commits; so does one whose named BEGIN was parsed and bound in
// one batch.
func TestNamedBeginsLevelTravelsWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, "CREATE TABLE nb (id int PRIMARY KEY, v int)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO nb VALUES (1, 0)")
	require.NoError(t, err)
	for name, sql := range map[string]string{
		"nb_begin":  "BEGIN",
		"nb_read":   "SELECT current_setting('transaction_isolation'), v FROM nb WHERE id = $1",
		"nb_update": "UPDATE nb SET v = v + 1 WHERE id = $1",
		"nb_commit": "COMMIT",
	} {
		_, err = conn.Prepare(ctx, name, sql)
		require.NoError(t, err)
	}
	logged := statementLog(t, c, conn, func() {
		for round := 1; round <= 2; round++ {
			_, err = conn.Exec(ctx, "nb_begin")
			require.NoError(t, err)
			var level string
			var v int
			require.NoError(t, conn.QueryRow(ctx, "nb_read", 1).Scan(&level, &v))
			require.Equal(t, "repeatable read", level, "round %d", round)
			require.Equal(t, round-1, v)
			_, err = conn.Exec(ctx, "nb_update", 1)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "nb_commit")
			require.NoError(t, err)
		}
	})
	require.Equal(t, 2, strings.Count(logged, "execute ordo_begin/ordo_begin: SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
		"the level set in the first statement's round trip, once per block:\n%s", logged)
	require.NotContains(t, logged, "statement: SET TRANSACTION", "a round trip of its own")
	// Ahead of a named statement's Parse it keeps a round trip of its
	// own, as the BEGIN of a wrapped statement does (the test above).
	logged = statementLog(t, c, conn, func() {
		_, err = conn.Exec(ctx, "nb_begin")
		require.NoError(t, err)
		_, err = conn.Prepare(ctx, "nb_read_named", "SELECT current_setting('transaction_isolation') FROM nb WHERE id = $1")
		require.NoError(t, err)
		var level string
		require.NoError(t, conn.QueryRow(ctx, "nb_read_named", 1).Scan(&level))
		require.Equal(t, "repeatable read", level)
		_, err = conn.Exec(ctx, "nb_commit")
		require.NoError(t, err)
	})
	require.Equal(t, 1, strings.Count(logged, "statement: SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"), "%s", logged)
	require.NotContains(t, logged, "execute ordo_begin")
	c.waitConverged()
	var v2 int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT v FROM nb WHERE id = 1").Scan(&v2))
	require.Equal(t, 2, v2)

	// A named BEGIN parsed and bound in one batch (pgbench -M prepared's
	// first transaction), its block's first statement parsed in the next
	// one: the level is set before that Parse, which takes the snapshot
	// (the block ran at the session's READ COMMITTED: review).
	h := hijackNode(t, c, 0)
	for _, first := range []string{"select 1", "select v from nb where id = 1"} {
		exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "nb_b", Query: "begin"}, &pgproto3.Bind{PreparedStatement: "nb_b"},
			&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "nb_b"}, &pgproto3.Sync{}})
		exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "nb_f", Query: first}, &pgproto3.Sync{}})
		out := exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "nb_l", Query: "select current_setting('transaction_isolation')"},
			&pgproto3.Bind{PreparedStatement: "nb_l"}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "nb_f"},
			&pgproto3.Close{ObjectType: 'S', Name: "nb_l"}, &pgproto3.Sync{}})
		require.Contains(t, out, `Row ["repeatable read"]`, "first parsed: %s\n%s", first, out)
		exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "rollback"}})
	}
	// The block's first statement in the BEGIN's own batch: the level is
	// set ahead of it there (a round trip of Ordo's would end the batch).
	// A SHOW transaction_isolation, which Ordo answers with a SELECT that
	// takes the snapshot at its Parse, says the level the client asked
	// for, and a statement after it does not fail (25001, session fuzzer
	// seed 1796172460055791629).
	for _, first := range []string{"select current_setting('transaction_isolation')", "show transaction_isolation", "select 1 as x into temp nb_tt"} {
		out := exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "nb_b", Query: "begin"}, &pgproto3.Bind{PreparedStatement: "nb_b"},
			&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "nb_b"}, &pgproto3.Parse{Query: first}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}})
		want := `Row ["repeatable read"]`
		switch {
		case strings.HasPrefix(first, "show"):
			want = `Row ["read committed"]`
		case strings.Contains(first, "into temp"):
			// It takes the snapshot at its Parse too (25001 after the
			// level was set ahead of its Bind: review).
			want = "Complete SELECT 1\nReady T"
		}
		require.Contains(t, out, want, "first: %s\n%s", first, out)
		out = exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select current_setting('transaction_isolation')"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}})
		require.Contains(t, out, `Row ["repeatable read"]`, "after %s\n%s", first, out)
		exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "rollback"}})
	}
	// A SAVEPOINT before the block's first query, in the next batch or in
	// the BEGIN's, as a query string or in a pipeline: the level goes
	// ahead of it (PostgreSQL sets none in a subtransaction, and the block
	// ran at the session's READ COMMITTED).
	begin := []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "nb_b", Query: "begin"}, &pgproto3.Bind{PreparedStatement: "nb_b"},
		&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "nb_b"}}
	savepoint := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "savepoint s"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	for i, batches := range [][][]pgproto3.FrontendMessage{
		{append(begin, &pgproto3.Sync{}), {&pgproto3.Query{String: "savepoint s; select 1"}}},
		{append(begin, &pgproto3.Sync{}), append(savepoint, &pgproto3.Sync{})},
		{append(append(begin, savepoint...), &pgproto3.Sync{})},
	} {
		for _, msgs := range batches {
			out := exchangeAll(t, h, msgs)
			require.NotContains(t, out, "Error", "case %d", i)
		}
		out := exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "select current_setting('transaction_isolation')"}})
		require.Contains(t, out, `Row ["repeatable read"]`, "case %d: %s", i, out)
		exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "rollback"}})
	}
	// A client's unnamed BEGIN of a lower level, rewritten at its Parse,
	// bound in the named BEGIN's block after a LOCK, which takes no
	// snapshot: Ordo's text stays, and the block runs at Ordo's level
	// (the client's text set READ UNCOMMITTED: review).
	exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin isolation level read uncommitted"},
		&pgproto3.Parse{Name: "nb_b", Query: "begin"}, &pgproto3.Bind{PreparedStatement: "nb_b"}, &pgproto3.Execute{},
		&pgproto3.Parse{Name: "nb_k", Query: "lock table nb in share mode"}, &pgproto3.Bind{PreparedStatement: "nb_k"}, &pgproto3.Execute{},
		&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "nb_b"}, &pgproto3.Close{ObjectType: 'S', Name: "nb_k"}, &pgproto3.Sync{}})
	out := exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select current_setting('transaction_isolation')"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}})
	require.Contains(t, out, `Row ["repeatable read"]`, "after a LOCK\n%s", out)
	exchangeAll(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "rollback"}})
}

// statementLog returns what node 1's PostgreSQL logged of the statements
// conn's session sent while run ran (log_statement = 'all' for the
// session, through Ordo; a marker statement ends it).
func statementLog(t *testing.T, c *cluster, conn *pgx.Conn, run func()) string {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, "SET log_statement = 'all'")
	require.NoError(t, err)
	logFile := c.pg.Servers[0].LogFile
	fi, err := os.Stat(logFile)
	require.NoError(t, err)
	from := fi.Size()
	run()
	const marker = "ordo e2e: end of the statements to look at"
	_, err = conn.Exec(ctx, "SELECT '"+marker+"'")
	require.NoError(t, err)
	var logged string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(logFile)
		require.NoError(t, err)
		logged = string(b[from:])
		return strings.Contains(logged, marker)
	}, 10*time.Second, 50*time.Millisecond)
	return logged[:strings.Index(logged, marker)]
}

// TestCompatDeallocatedCommitName: a COMMIT prepared under a name, which
// SQL's DEALLOCATE then frees inside a block: a Bind of the name fails
// (26000) and fails the block, which the client rolls back. Ordo took the
// name for the COMMIT it no longer is (DEALLOCATE's tag does not say
// which name it freed), committed the block's insert on every node, and
// the client, told the block failed, saw it rolled back on PostgreSQL
// alone (the session fuzzer, seed 1796181147388393039 under dbsm-rc).
func TestCompatDeallocatedCommitName(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm")
	o, p := sb.conns(t)
	same(t, o, p, "create table dc (k int primary key)")
	ho, hp := sb.hijacked(t)
	answersAlike(t, ho, hp, [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Name: "dc_commit", Query: "commit"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "begin; deallocate dc_commit; insert into dc values (1) returning k"}},
		{&pgproto3.Bind{PreparedStatement: "dc_commit"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "rollback"}},
		{&pgproto3.Query{String: "select count(*) from dc"}},
		// The same name freed earlier in the batch that binds it (DEALLOCATE
		// ALL, then of the name), after an insert of the batch's implicit
		// transaction: PostgreSQL refuses the Bind, and the Sync rolls the
		// insert back (the session fuzzer, seed 1796184680674965952: Ordo
		// committed it).
		{&pgproto3.Parse{Name: "dc_commit", Query: "commit"}, &pgproto3.Parse{Name: "dc_commit2", Query: "commit"}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "deallocate all"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "insert into dc values (2)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "dc_commit"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Name: "dc_commit", Query: "commit"}, &pgproto3.Parse{Name: "dc_commit2", Query: "commit"}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: `deallocate "dc_commit2"`}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "insert into dc values (3)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "dc_commit2"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		// A quoted name with a space in it: the session read the name
		// out of the DEALLOCATE's text, missed it, and took the Bind for
		// the COMMIT.
		{&pgproto3.Parse{Name: "dc commit", Query: "commit"}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: `deallocate "dc commit"`}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "insert into dc values (4)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "dc commit"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		// A DISCARD that frees nothing, with "all" in a comment: the
		// session took it for DISCARD ALL, left the Bind of the COMMIT
		// after it to PostgreSQL, and the block's insert committed on
		// node 1 alone.
		{&pgproto3.Parse{Name: "dc_commit3", Query: "commit"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "begin; insert into dc values (5)"}},
		{&pgproto3.Parse{Query: "discard plans /* all */"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "dc_commit3"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "select string_agg(k::text, ',' order by k) from dc"}},
	})
	requireKeysEverywhere(t, sb.c, "dc", "5") // only the insert PostgreSQL committed
}

// requireKeysEverywhere waits for the cluster to converge and requires
// table's keys k, in order and joined by commas, to be keys on every node.
func requireKeysEverywhere(t *testing.T, c *cluster, table, keys string) {
	t.Helper()
	c.waitConverged()
	for i := range c.nodes {
		var got string
		require.NoError(t, c.direct(i).QueryRow(context.Background(), "select coalesce(string_agg(k::text, ',' order by k), '') from "+table).Scan(&got))
		require.Equal(t, keys, got, "node %d", i+1)
	}
}

// TestUpdateAfterABeginNotExecuted: a BEGIN bound into a portal that the
// batch has not executed before an update: PostgreSQL runs the update in
// the batch's implicit transaction and commits it at the Sync. Ordo had
// taken the block as begun at the Bind and left the update to the
// client's COMMIT: it committed on node 1 alone (review). Bound into the
// unnamed portal the BEGIN was in, the BEGIN never runs, and the insert is
// replicated; bound into another portal, the BEGIN may run after it, and
// the update is refused. With the BEGIN executed first, the same batch is
// replicated.
func TestUpdateAfterABeginNotExecuted(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	mustExec(t, c.connect(0))("create table bx (k int primary key)")
	c.waitConverged()
	h := hijackNode(t, c, 0)
	insert := func(k string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "insert into bx values (" + k + ")"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	for _, portal := range []string{"", "bx_p"} {
		name := "bx_b" + portal // (the refusal skips the Close)
		msgs := append([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: "begin"}, &pgproto3.Bind{PreparedStatement: name, DestinationPortal: portal}},
			insert("1")...)
		out := exchange(t, h, append(msgs, &pgproto3.Close{ObjectType: 'S', Name: name}, &pgproto3.Sync{}))
		if portal == "" {
			// The insert's Bind replaces the BEGIN's portal: the BEGIN
			// never runs, and the insert commits at the Sync, as on
			// PostgreSQL, on every node.
			require.Contains(t, out, "Complete INSERT 0 1", "portal %q", portal)
		} else {
			require.Contains(t, out, "Error ERROR 0A000 ordo: this batch bound a BEGIN into a portal it has not executed", "portal %q", portal)
		}
		require.True(t, strings.HasSuffix(out, "Ready I\n"), out)
	}
	out := exchange(t, h, append(append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "begin"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, insert("2")...), &pgproto3.Sync{}))
	require.True(t, strings.HasSuffix(out, "Ready T\n"), out)
	require.Contains(t, exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "commit"}}), "Complete COMMIT")
	requireKeysEverywhere(t, c, "bx", "1,2")
}

// TestDeallocateOfOneNameKeepsTheOthers: a DEALLOCATE of one name sent
// as a query (psycopg's, when its cache of prepared statements is full)
// frees that name only: the session knows the others still, and a Bind
// of one of them costs no read of pg_prepared_statements, which it did
// after every DEALLOCATE (its tag does not say which name it freed).
// The freed name is known freed: its Bind fails as on PostgreSQL.
func TestDeallocateOfOneNameKeepsTheOthers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	for name, sql := range map[string]string{"dk_a": "select 1", "dk_b": "select 2"} {
		_, err := conn.Prepare(ctx, name, sql)
		require.NoError(t, err)
	}
	logged := statementLog(t, c, conn, func() {
		_, err := conn.PgConn().Exec(ctx, "deallocate dk_a").ReadAll()
		require.NoError(t, err)
		var v int
		require.NoError(t, conn.QueryRow(ctx, "dk_b").Scan(&v))
		require.Equal(t, 2, v)
	})
	require.NotContains(t, logged, "pg_prepared_statements", "a read of the names after a DEALLOCATE of another")
	// The freed one: PostgreSQL refuses its Bind (26000).
	_, err := conn.PgConn().ExecPrepared(ctx, "dk_a", nil, nil, nil).Close()
	require.Error(t, err)
	require.Equal(t, "26000", sqlstate(err), "%v", err)
}
