package e2e

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestRolledBackDDLIsNotReplicated is the sequence psql's
// ON_ERROR_ROLLBACK, Django's nested atomic(), Rails' nested transactions
// and SQLAlchemy's begin_nested() produce: DDL that fails or is rolled
// back to a savepoint, then a commit. Only what committed reaches the
// other nodes (they used to replay the failed ALTER, fail, and stop for
// good), and a DROP rolled back to a savepoint drops nothing anywhere.
func TestRolledBackDDLIsNotReplicated(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	exec := mustExec(t, conn)
	exec("CREATE TABLE sp (id int PRIMARY KEY, c int)")
	exec("BEGIN")
	exec("SAVEPOINT s")
	_, err := conn.Exec(ctx, "ALTER TABLE sp ADD COLUMN c int")
	require.Error(t, err, "the column exists")
	exec("ROLLBACK TO s")
	exec("INSERT INTO sp VALUES (1, 1)")
	exec("COMMIT")

	exec("CREATE TABLE keep (id int PRIMARY KEY)")
	exec("BEGIN")
	exec("SAVEPOINT s")
	exec("DROP TABLE keep")
	exec("ALTER TABLE sp ADD COLUMN gone int")
	exec("ROLLBACK TO s")
	exec("ALTER TABLE sp ADD COLUMN d int")
	exec("INSERT INTO keep VALUES (1)")
	exec("COMMIT")
	c.waitConverged()

	want := c.schemaFingerprint(0)
	for i := range c.nodes {
		require.NoError(t, c.nodes[i].Replica().Err(), "node %d must keep accepting updates", i+1)
		require.Equal(t, want, c.schemaFingerprint(i), "node %d's schema", i+1)
		require.Equal(t, c.checksum(0, "sp"), c.checksum(i, "sp"))
		require.Equal(t, c.checksum(0, "keep"), c.checksum(i, "keep"))
	}
	// Every node still takes writes.
	for i := range c.nodes {
		_, err := c.connect(i).Exec(ctx, "INSERT INTO sp (id, c, d) VALUES ($1, 0, 0)", 10+i)
		require.NoError(t, err, "node %d", i+1)
	}
	c.waitConverged()
	require.Equal(t, c.checksum(0, "sp"), c.checksum(2, "sp"))
}

// TestRolledBackRoleStatementsAreNotReplicated: statements no event
// trigger sees (roles here) are replayed as sent, so the session follows
// savepoints: one rolled back to a savepoint is not replicated, nor one
// that failed (psql's ON_ERROR_ROLLBACK pattern: the other nodes used to
// replay a CREATE ROLE that failed on the origin, and fail), while one
// kept by RELEASE is.
func TestRolledBackRoleStatementsAreNotReplicated(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	exec := mustExec(t, conn)
	exec("CREATE ROLE sp_existing")
	exec("CREATE TABLE sp_t (id int PRIMARY KEY)")
	exec("BEGIN")
	exec("SAVEPOINT a")
	exec("CREATE ROLE sp_undone")
	exec("SAVEPOINT b")
	exec("CREATE ROLE sp_undone_too")
	exec("ROLLBACK TO a")
	exec("SAVEPOINT c")
	_, err := conn.Exec(ctx, "CREATE ROLE sp_existing")
	require.Error(t, err, "the role exists")
	exec("ROLLBACK TO c")
	exec("SAVEPOINT d")
	exec("CREATE ROLE sp_released")
	exec("RELEASE d")
	exec("CREATE ROLE sp_kept")
	exec("INSERT INTO sp_t VALUES (1)")
	exec("COMMIT")
	// The same in one query string.
	exec("BEGIN; SAVEPOINT s; CREATE ROLE sp_string_undone; ROLLBACK TO s; CREATE ROLE sp_string_kept; COMMIT")
	c.waitConverged()
	for i := range c.nodes {
		require.NoError(t, c.nodes[i].Replica().Err(), "node %d must keep accepting updates", i+1)
		var roles string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolname LIKE 'sp\\_%'").Scan(&roles))
		require.Equal(t, "sp_existing,sp_kept,sp_released,sp_string_kept", roles, "node %d", i+1)
	}
}

// TestSavepointStatementsPostgreSQLSkipsAreNotFollowed: a SAVEPOINT,
// RELEASE or ROLLBACK TO that PostgreSQL does not run (sent in a failed
// block, which refuses it with 25P02, or pipelined in a driver's batch
// after a statement that failed, which PostgreSQL skips) changes none of
// the savepoints the session follows. The session took them for run: a
// later ROLLBACK TO then found the wrong savepoint, and a role created
// after the real one was replayed on the other nodes though the origin
// had rolled it back, or one kept on the origin was replayed nowhere (the
// session fuzzer under cons, seed 1796193344906985809 at 17aff12, where
// a refusal outlived its ROLLBACK TO the same way).
func TestSavepointStatementsPostgreSQLSkipsAreNotFollowed(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	exec := mustExec(t, conn)
	fails := func(sql, code string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.Equal(t, code, sqlstate(err), sql)
	}
	batchFails := func(code string, sqls ...string) {
		t.Helper()
		b := &pgx.Batch{}
		for _, q := range sqls {
			b.Queue(q)
		}
		require.Equal(t, code, sqlstate(conn.SendBatch(ctx, b).Close()), "%v", sqls)
	}
	exec("CREATE TABLE sk_t (id int PRIMARY KEY)")
	// A SAVEPOINT sent in a failed block.
	exec("BEGIN")
	exec("SAVEPOINT s")
	exec("CREATE ROLE sk_undone_query")
	fails("SELECT 1/0", "22012")
	fails("SAVEPOINT s", "25P02")
	exec("ROLLBACK TO s")
	exec("INSERT INTO sk_t VALUES (1)")
	exec("COMMIT")
	// A SAVEPOINT, then a RELEASE, after a failed statement of a batch.
	for i, second := range []string{"SAVEPOINT s", "RELEASE s"} {
		exec("BEGIN")
		exec("SAVEPOINT s")
		exec("CREATE ROLE sk_undone_batch" + strconv.Itoa(i))
		batchFails("22012", "SELECT 1/0", second)
		exec("ROLLBACK TO s")
		exec("INSERT INTO sk_t VALUES (" + strconv.Itoa(10+i) + ")")
		exec("COMMIT")
	}
	// A ROLLBACK TO after a failed statement of a batch: the role
	// created before the savepoint rolled back to next stays.
	exec("BEGIN")
	exec("SAVEPOINT s")
	exec("CREATE ROLE sk_kept")
	exec("SAVEPOINT s2")
	batchFails("22012", "SELECT 1/0", "ROLLBACK TO s")
	exec("ROLLBACK TO s2")
	exec("INSERT INTO sk_t VALUES (20)")
	exec("COMMIT")
	// The same, as a client's messages (the review of the fix): a
	// SAVEPOINT prepared earlier and bound in a failed block after a
	// Describe that passes; a SAVEPOINT, then a ROLLBACK, after a COPY of
	// the batch that failed on its data.
	h := hijackNode(t, c, 0)
	copyFails := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "COPY sk_t FROM STDIN"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.CopyData{Data: []byte("notanint\n")}, &pgproto3.CopyDone{}}
	for i, msgs := range [][]pgproto3.FrontendMessage{
		queryMsg("BEGIN"), queryMsg("SAVEPOINT s"), queryMsg("CREATE ROLE sk_undone_described"),
		{&pgproto3.Parse{Name: "sk_sp", Query: "SAVEPOINT s"}, &pgproto3.Sync{}},
		queryMsg("SELECT 1/0"),
		{&pgproto3.Describe{ObjectType: 'S', Name: "sk_sp"}, &pgproto3.Bind{PreparedStatement: "sk_sp"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		queryMsg("ROLLBACK TO s"), queryMsg("INSERT INTO sk_t VALUES (30)"), queryMsg("COMMIT"),

		queryMsg("BEGIN"), queryMsg("SAVEPOINT s"), queryMsg("CREATE ROLE sk_undone_copy"),
		append(slices.Clone(copyFails), &pgproto3.Parse{Query: "SAVEPOINT s"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}),
		queryMsg("ROLLBACK TO s"), queryMsg("INSERT INTO sk_t VALUES (31)"), queryMsg("COMMIT"),

		queryMsg("BEGIN"), queryMsg("CREATE ROLE sk_kept_copy"), queryMsg("SAVEPOINT s"),
		append(slices.Clone(copyFails), &pgproto3.Parse{Query: "ROLLBACK"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}),
		queryMsg("ROLLBACK TO s"), queryMsg("INSERT INTO sk_t VALUES (32)"), queryMsg("COMMIT"),
	} {
		out := exchange(t, h, msgs)
		require.NotContains(t, out, "ERROR 55", "step %d", i)
		require.NotContains(t, out, "ordo:", "step %d", i)
	}
	c.waitConverged()
	for i := range c.nodes {
		require.NoError(t, c.nodes[i].Replica().Err(), "node %d must keep accepting updates", i+1)
		var roles string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT coalesce(string_agg(rolname, ',' ORDER BY rolname), '') FROM pg_roles WHERE rolname LIKE 'sk\\_%'").Scan(&roles))
		require.Equal(t, "sk_kept,sk_kept_copy", roles, "node %d", i+1)
		require.Equal(t, c.checksum(0, "sk_t"), c.checksum(i, "sk_t"), "node %d", i+1)
	}
}

// TestRoleStatementsRunAtTheirExecute: a role's statement, which no event
// trigger proves ran, is replicated only if its portal was executed.
// PostgreSQL runs a statement at its Execute; the session followed it at
// its Bind, so a role bound and never executed (no Execute before the
// Sync, the portal bound again, or closed) was created on the other nodes
// and not on the origin (the review of the session fuzzer's fixes,
// status.md). One executed in a later batch of its block is replicated,
// and follows the savepoints set before its Execute, not its Bind. And
// what PostgreSQL skips after an error in a batch (an Execute, a Close, a
// Bind), or a Query that drops no portal, leaves the portal to a later
// Execute, which replicates the role (the review of the first version of
// the fix, which took each of them for done). A cursor takes a closed
// portal's name; a Bind refused stays refused in a later batch (the review
// of the second version).
func TestRoleStatementsRunAtTheirExecute(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	h := hijackNode(t, c, 0)
	role := func(name string) *pgproto3.Parse { return &pgproto3.Parse{Query: "CREATE ROLE " + name} }
	fail := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	type step struct {
		msgs  []pgproto3.FrontendMessage
		fails bool
	}
	steps := []step{
		// Autocommit: bound, never executed.
		{msgs: []pgproto3.FrontendMessage{role("bx_never"), &pgproto3.Bind{}, &pgproto3.Sync{}}},
		// Autocommit: the unnamed portal bound again before its Execute.
		{msgs: []pgproto3.FrontendMessage{role("bx_replaced"), &pgproto3.Bind{}, role("bx_ran"), &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
		// Autocommit: executed.
		{msgs: []pgproto3.FrontendMessage{role("bx_plain"), &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
		// In a block: a named portal bound, closed, never executed; another
		// bound in one batch and executed in the next; one left bound at
		// the COMMIT.
		{msgs: queryMsg("BEGIN")},
		{msgs: []pgproto3.FrontendMessage{role("bx_closed"), &pgproto3.Bind{DestinationPortal: "p1"}, &pgproto3.Close{ObjectType: 'P', Name: "p1"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{role("bx_later"), &pgproto3.Bind{DestinationPortal: "p2"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "p2"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{role("bx_left"), &pgproto3.Bind{DestinationPortal: "p3"}, &pgproto3.Sync{}}},
		// Bound before a savepoint, executed after it, rolled back to it;
		// bound before a savepoint, executed before a second one, which
		// is rolled back to: the first undone, the second kept.
		{msgs: []pgproto3.FrontendMessage{role("bx_undone"), &pgproto3.Bind{DestinationPortal: "p4"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{role("bx_kept"), &pgproto3.Bind{DestinationPortal: "p5"}, &pgproto3.Sync{}}},
		{msgs: queryMsg("SAVEPOINT s")},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "p5"}, &pgproto3.Sync{}}},
		{msgs: queryMsg("SAVEPOINT s2")},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "p4"}, &pgproto3.Sync{}}},
		{msgs: queryMsg("ROLLBACK TO s2")},
		// Closed and bound again to a query, then executed: the query
		// runs, not the role.
		{msgs: []pgproto3.FrontendMessage{role("bx_rebound"), &pgproto3.Bind{DestinationPortal: "p6"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'P', Name: "p6"}, &pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: "p6"}, &pgproto3.Execute{Portal: "p6"}, &pgproto3.Sync{}}},
		// Closed, and its name taken by a cursor, which the Execute runs.
		{msgs: []pgproto3.FrontendMessage{role("bx_cursor"), &pgproto3.Bind{DestinationPortal: "p7"}, &pgproto3.Close{ObjectType: 'P', Name: "p7"}, &pgproto3.Sync{}}},
		{msgs: queryMsg("DECLARE p7 CURSOR FOR SELECT 1")},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "p7"}, &pgproto3.Sync{}}},
		{msgs: queryMsg("COMMIT")},
		// Refused at its Bind (a BEGIN bound into a portal not executed
		// yet), not executed before the Sync, executed in the next batch:
		// refused there (it ran unseen, and the role was on the origin
		// alone: the same review).
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "bx_b", Query: "BEGIN"}, &pgproto3.Bind{DestinationPortal: "pb", PreparedStatement: "bx_b"},
			&pgproto3.Parse{Name: "bx_r", Query: "CREATE ROLE bx_refused"}, &pgproto3.Bind{DestinationPortal: "pr", PreparedStatement: "bx_r"},
			&pgproto3.Execute{Portal: "pb"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "pr"}, &pgproto3.Sync{}}, fails: true},
		{msgs: queryMsg("ROLLBACK")},
		// Skipped after an error of their batch, then undone by a
		// ROLLBACK TO: an Execute, a Close, a Bind of a portal that
		// exists (which PostgreSQL refuses, 42P03); then executed.
		{msgs: queryMsg("BEGIN")},
		{msgs: []pgproto3.FrontendMessage{role("bx_skip_exec"), &pgproto3.Bind{DestinationPortal: "q1"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{role("bx_skip_close"), &pgproto3.Bind{DestinationPortal: "q2"}, &pgproto3.Sync{}}},
		{msgs: []pgproto3.FrontendMessage{role("bx_dup_bind"), &pgproto3.Bind{DestinationPortal: "q3"}, &pgproto3.Sync{}}},
		{msgs: queryMsg("SAVEPOINT s")},
		{msgs: append(slices.Clone(fail), &pgproto3.Execute{Portal: "q1"}, &pgproto3.Close{ObjectType: 'P', Name: "q2"}, &pgproto3.Sync{}), fails: true},
		{msgs: queryMsg("ROLLBACK TO s")},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{DestinationPortal: "q3"}, &pgproto3.Sync{}}, fails: true},
		{msgs: queryMsg("ROLLBACK TO s")},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "q1"}, &pgproto3.Execute{Portal: "q2"}, &pgproto3.Execute{Portal: "q3"}, &pgproto3.Sync{}}},
		// A Query with no statement (pgx's ping) drops no portal.
		{msgs: []pgproto3.FrontendMessage{role("bx_after_ping"), &pgproto3.Bind{}, &pgproto3.Sync{}}},
		{msgs: queryMsg("-- ping")},
		{msgs: []pgproto3.FrontendMessage{&pgproto3.Execute{}, &pgproto3.Sync{}}},
		{msgs: queryMsg("COMMIT")},
	}
	for i, st := range steps {
		out := exchange(t, h, st.msgs)
		if st.fails {
			require.Contains(t, out, "Error ERROR", "step %d", i)
		} else {
			require.NotContains(t, out, "Error ", "step %d", i)
		}
	}
	c.waitConverged()
	want := "bx_after_ping,bx_dup_bind,bx_kept,bx_later,bx_plain,bx_ran,bx_skip_close,bx_skip_exec"
	for i := range c.nodes {
		require.NoError(t, c.nodes[i].Replica().Err(), "node %d must keep accepting updates", i+1)
		var roles string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT coalesce(string_agg(rolname, ',' ORDER BY rolname), '') FROM pg_roles WHERE rolname LIKE 'bx\\_%'").Scan(&roles))
		require.Equal(t, want, roles, "node %d", i+1)
	}
}

// TestDDLInBlocksAndFunctions: DDL run by a DO block or a function is
// replicated (it used to stay on its node alone) when its transaction
// writes no rows, and refused with a clear error, changing nothing, when
// it does (replaying the block and applying its rows would do the writes
// twice).
func TestDDLInBlocksAndFunctions(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn := c.connect(1)
	// An idempotent migration.
	for range 2 {
		_, err := conn.Exec(ctx, `DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_tables WHERE tablename = 'migrated') THEN
				CREATE TABLE migrated (id int PRIMARY KEY, v text);
				CREATE INDEX migrated_v ON migrated (v);
			END IF;
		END $$`)
		require.NoError(t, err)
	}
	_, err := conn.Exec(ctx, `CREATE FUNCTION mk_part(n int) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN EXECUTE format('CREATE TABLE part_%s (id int PRIMARY KEY)', n); END $$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT mk_part(7)")
	require.NoError(t, err)
	c.waitConverged()
	want := c.schemaFingerprint(1)
	for i := range c.nodes {
		require.Equal(t, want, c.schemaFingerprint(i), "node %d's schema", i+1)
	}
	_, err = c.connect(2).Exec(ctx, "INSERT INTO part_7 VALUES (1); INSERT INTO migrated VALUES (1, 'x')")
	require.NoError(t, err, "the tables exist on every node")

	// DDL in a block, in a transaction that writes rows: refused.
	for _, sql := range []string{"BEGIN", "INSERT INTO migrated VALUES (2, 'y')", "SELECT mk_part(8)"} {
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err = conn.Exec(ctx, "COMMIT")
	require.Error(t, err)
	require.Equal(t, "0A000", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "run the DDL as plain statements")
	c.waitConverged()
	for i := range c.nodes {
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'part_8'").Scan(&n))
		require.Zero(t, n, "node %d", i+1)
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM migrated").Scan(&n))
		require.Equal(t, 1, n, "node %d: the refused transaction wrote nothing", i+1)
		require.NoError(t, c.nodes[i].Replica().Err())
	}
}

// TestCreateTableAsCopiesRowsOnce: CREATE TABLE … AS and SELECT … INTO
// create their table on the other nodes WITH NO DATA and take the rows
// from the write set (the replayed query used to fill the table, then the
// decoded rows were applied too: 10 rows on the origin, 20 elsewhere),
// even from a volatile query.
func TestCreateTableAsCopiesRowsOnce(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE ctas AS SELECT g AS id, random() AS r FROM generate_series(1, 10) g",
		"SELECT g AS id, clock_timestamp() AS at INTO selinto FROM generate_series(1, 5) g",
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for i := range c.nodes {
		for table, want := range map[string]int{"ctas": 10, "selinto": 5} {
			var n int
			require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
			require.Equal(t, want, n, "node %d, %s", i+1, table)
			require.Equal(t, c.checksum(0, table), c.checksum(i, table), "node %d, %s", i+1, table)
		}
	}
}

// TestDDLReplaysUnderTheOriginsSettings: a rewrite whose result depends
// on the session's settings (timestamp to timestamptz reads the values in
// TimeZone) gives the same values on every node (12:00 in New York was
// 17:00 UTC on the origin and 12:00 UTC elsewhere), and DDL runs in the
// schema the origin's search_path named, however it was set (set_config
// is invisible to the proxy).
func TestDDLReplaysUnderTheOriginsSettings(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE tz (id int PRIMARY KEY, ts timestamp)",
		"INSERT INTO tz VALUES (1, '2026-01-15 12:00:00')",
		"CREATE SCHEMA other",
		"SET TimeZone = 'America/New_York'",
		"SET DateStyle = 'SQL, DMY'",
		"ALTER TABLE tz ALTER COLUMN ts TYPE timestamptz",
		"BEGIN",
		"SELECT set_config('search_path', 'other', true)",
		"CREATE TABLE placed (id int PRIMARY KEY)",
		"COMMIT",
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for i := range c.nodes {
		var utc string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT to_char(ts AT TIME ZONE 'UTC', 'HH24:MI') FROM tz WHERE id = 1").Scan(&utc))
		require.Equal(t, "17:00", utc, "node %d", i+1)
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'other' AND tablename = 'placed'").Scan(&n))
		require.Equal(t, 1, n, "node %d: the table is in schema other", i+1)
		require.NoError(t, c.nodes[i].Replica().Err())
	}
}

// TestVolatileRewritesAreRefused: a column filled from a volatile default
// (random(), a serial's nextval()) would get different values on every
// node that replays the rewrite; it is refused at the origin with a hint,
// and a constant default (no rewrite) still works.
func TestVolatileRewritesAreRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn := c.connect(0)
	for _, sql := range []string{"CREATE TABLE vr (id int PRIMARY KEY)", "INSERT INTO vr SELECT generate_series(1, 5)"} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	for _, sql := range []string{
		"ALTER TABLE vr ADD COLUMN r float8 DEFAULT random()",
		"ALTER TABLE vr ADD COLUMN n serial",
	} {
		_, err := conn.Exec(ctx, sql)
		require.Error(t, err, sql)
		require.Equal(t, "0A000", sqlstate(err), "%s: %v", sql, err)
		require.Contains(t, err.Error(), "volatile default", sql)
	}
	for _, sql := range []string{
		"ALTER TABLE vr ADD COLUMN k int DEFAULT 7",
		"CREATE TABLE vr_empty (id int PRIMARY KEY)",
		"ALTER TABLE vr_empty ADD COLUMN n serial", // no rows: nothing to differ
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for i := range c.nodes {
		require.Equal(t, c.checksum(0, "vr"), c.checksum(i, "vr"), "node %d", i+1)
	}
}

// TestExtensionsWithUpdateScripts: CREATE EXTENSION of an extension whose
// chain of update scripts drops operators (hstore 1.4→1.8, cube, intarray)
// is replicated like any other (compatibility.md, cause 10: the scripts'
// DROP OPERATOR records were taken for DDL run inside a function, and the
// statement refused), and so are ALTER EXTENSION … UPDATE and a DROP in
// the same query string.
func TestExtensionsWithUpdateScripts(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	o := c.connect(0)
	for _, sql := range []string{
		"create extension hstore",
		"create table ext_t (k int primary key, h hstore)",
		"insert into ext_t values (1, 'a=>1')",
		"create extension cube version '1.4'",
		"alter extension cube update",
		"create table ext_gone (k int); drop table ext_gone; create extension intarray",
	} {
		_, err := o.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for i := range c.nodes {
		var exts string
		require.NoError(t, c.direct(i).QueryRow(ctx,
			"select string_agg(extname || ' ' || extversion, ', ' order by extname) from pg_extension where extname in ('hstore', 'cube', 'intarray')").Scan(&exts))
		require.Equal(t, "cube 1.5, hstore 1.8, intarray 1.5", exts, "node %d", i+1)
		var v string
		require.NoError(t, c.direct(i).QueryRow(ctx, "select h -> 'a' from ext_t where k = 1").Scan(&v))
		require.Equal(t, "1", v, "node %d", i+1)
		var gone bool
		require.NoError(t, c.direct(i).QueryRow(ctx, "select to_regclass('ext_gone') is null").Scan(&gone))
		require.True(t, gone, "node %d", i+1)
	}
}

// mustExec returns a function that runs a statement on conn and fails the
// test if it fails.
func mustExec(t *testing.T, conn *pgx.Conn) func(sql string) {
	return func(sql string) {
		t.Helper()
		_, err := conn.Exec(context.Background(), sql)
		require.NoError(t, err, sql)
	}
}

// execAll runs each statement on conn in turn and fails the test at the
// first that fails.
func execAll(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		_, err := conn.Exec(context.Background(), sql)
		require.NoError(t, err, sql)
	}
}
