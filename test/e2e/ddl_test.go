package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// schemaFingerprint summarizes the user schema of node i's database from
// the catalog: tables and columns, indexes, views, functions, sequences,
// comments and privileges.
func (c *cluster) schemaFingerprint(i int) string {
	var fp string
	err := c.direct(i).QueryRow(context.Background(), `SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
		SELECT 'col ' || table_schema || '.' || table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '') || ' ' || is_nullable AS x
		  FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema', '_ordo')
		UNION ALL SELECT 'idx ' || schemaname || ' ' || indexdef FROM pg_indexes WHERE schemaname NOT IN ('pg_catalog', '_ordo')
		UNION ALL SELECT 'view ' || schemaname || '.' || viewname || ' ' || definition FROM pg_views WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
		UNION ALL SELECT 'fn ' || n.nspname || '.' || p.proname || ' ' || pg_get_function_identity_arguments(p.oid) || ' ' || md5(p.prosrc)
		  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
		UNION ALL SELECT 'type ' || n.nspname || '.' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', '_ordo', 'pg_toast') AND t.typtype IN ('e', 'c', 'd') AND NOT EXISTS (SELECT 1 FROM pg_class r WHERE r.reltype = t.oid)
		UNION ALL SELECT 'comment ' || c.relname || ' ' || obj_description(c.oid, 'pg_class') FROM pg_class c WHERE obj_description(c.oid, 'pg_class') IS NOT NULL
		UNION ALL SELECT 'grant ' || table_schema || '.' || table_name || ' ' || grantee || ' ' || privilege_type FROM information_schema.role_table_grants
		  WHERE table_schema NOT IN ('pg_catalog', 'information_schema', '_ordo')
		UNION ALL SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' AND nspname NOT IN ('information_schema', '_ordo')
		UNION ALL SELECT 'role ' || rolname FROM pg_roles WHERE rolname NOT LIKE 'pg_%'
	) s`).Scan(&fp)
	require.NoError(c.t, err)
	return fp
}

// TestEveryDDLKindReplicates sends each kind of schema change through a
// different node and checks the schema fingerprints of all nodes are equal
// after each, under dbsm, pgr and cons.
func TestEveryDDLKindReplicates(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm", "pgr", "cons"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel() // separate clusters; most of each is waiting for replays
			everyDDLKindReplicates(t, protocol)
		})
	}
}

func everyDDLKindReplicates(t *testing.T, protocol string) {
	c := startCluster(t, 3, protocol)
	ctx := context.Background()
	conns := []interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}{c.connect(0), c.connect(1), c.connect(2)}
	steps := []string{
		"CREATE SCHEMA app",
		"CREATE TYPE app.mood AS ENUM ('ok', 'great')",
		"CREATE DOMAIN app.posint AS int CHECK (VALUE > 0)",
		"CREATE TABLE app.person (id bigserial PRIMARY KEY, name text NOT NULL, mood app.mood, age app.posint)",
		"CREATE INDEX person_name ON app.person (name)",
		"ALTER TABLE app.person ADD COLUMN email text",
		"CREATE UNIQUE INDEX person_email ON app.person (email)",
		"COMMENT ON TABLE app.person IS 'people'",
		"CREATE VIEW app.happy AS SELECT id, name FROM app.person WHERE mood = 'great'",
		"CREATE FUNCTION app.greet(p text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'hello ' || p $$",
		"CREATE ROLE app_reader",
		"GRANT SELECT ON app.person TO app_reader",
		"INSERT INTO app.person (name, mood, age, email) VALUES ('ann', 'great', 30, 'ann@example.com')",
		"CREATE MATERIALIZED VIEW app.by_mood AS SELECT mood, count(*) AS n FROM app.person GROUP BY mood",
		"CREATE UNIQUE INDEX by_mood_key ON app.by_mood (mood)",
		"INSERT INTO app.person (name, mood, age) VALUES ('bob', 'ok', 40)",
		// PostgreSQL builds a concurrent refresh's difference in a
		// temporary table, which no prepared transaction may touch: it
		// runs as a plain refresh.
		"REFRESH MATERIALIZED VIEW CONCURRENTLY app.by_mood",
		"INSERT INTO app.person (name, mood, age) VALUES ('cy', 'ok', 50)",
		"extended:REFRESH MATERIALIZED VIEW CONCURRENTLY app.by_mood",
		"ALTER TABLE app.person RENAME COLUMN age TO years",
		"CREATE TABLE app.tmp (id int PRIMARY KEY)",
		"TRUNCATE app.person",
		"REVOKE SELECT ON app.person FROM app_reader",
		"DROP VIEW app.happy",
		"DROP TABLE app.tmp",
		"DROP INDEX app.person_name",
		// Cannot run in a transaction block: replicated without
		// CONCURRENTLY (simple and extended protocol), or local.
		"CREATE INDEX CONCURRENTLY person_years ON app.person (years)",
		"extended:CREATE UNIQUE INDEX CONCURRENTLY person_lower_name ON app.person (lower(name))",
		"DROP INDEX CONCURRENTLY app.person_years",
		"REINDEX TABLE CONCURRENTLY app.person",
		"VACUUM ANALYZE app.person",
		"CREATE DATABASE node_local_db",
	}
	for i, sql := range steps {
		var args []any
		if s, ok := strings.CutPrefix(sql, "extended:"); ok {
			sql, args = s, []any{pgx.QueryExecModeDescribeExec}
		}
		_, err := conns[i%3].Exec(ctx, sql, args...)
		require.NoError(t, err, "step %d through node %d: %s", i, i%3+1, sql)
		c.waitConverged()
		fp := c.schemaFingerprint(0)
		for n := 1; n < 3; n++ {
			require.Equal(t, fp, c.schemaFingerprint(n), "after step %d (%s) node %d's schema differs", i, sql, n+1)
		}
	}
	var refreshed int
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT n FROM app.by_mood WHERE mood = 'ok'").Scan(&refreshed))
	require.Equal(t, 2, refreshed, "the last refresh saw both inserts")
	for n := 1; n < 3; n++ {
		require.Equal(t, c.checksum(0, "app.by_mood"), c.checksum(n, "app.by_mood"), "node %d's materialized view differs", n+1)
	}
	// A DDL statement that fails fails everywhere with PostgreSQL's own
	// error, and changes nothing.
	_, err := conns[1].Exec(ctx, "CREATE TABLE app.person (id int)")
	require.Error(t, err)
	require.Equal(t, "42P07", sqlstate(err), "PostgreSQL's own duplicate_table error: %v", err)
	// Inside a transaction block PostgreSQL's own refusal stands.
	tx, err := c.connect(0).Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "CREATE INDEX CONCURRENTLY person_x ON app.person (email)")
	require.Equal(t, "25001", sqlstate(err), "active_sql_transaction: %v", err)
	require.NoError(t, tx.Rollback(ctx))
	for n := range c.nodes {
		require.Zero(t, c.unreplicated(n))
	}
}

// TestWriteConcurrentWithAlterTableFailsCertification: a transaction whose
// snapshot predates an ALTER TABLE committed on another node, and that
// writes that table, fails certification; one that starts after succeeds.
func TestWriteConcurrentWithAlterTableFailsCertification(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a, b := c.connect(0), c.connect(1)
	_, err := a.Exec(ctx, "CREATE TABLE item (id int PRIMARY KEY, qty int)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "CREATE TABLE other (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO item VALUES (1, 1), (2, 2)")
	require.NoError(t, err)
	c.waitConverged()

	before, err := b.Begin(ctx)
	require.NoError(t, err)
	var q int
	// The snapshot is taken on another table, so no lock on item stands in
	// the ALTER TABLE's way: certification alone must catch the conflict.
	require.NoError(t, before.QueryRow(ctx, "SELECT count(*) FROM other").Scan(&q))
	_, err = a.Exec(ctx, "ALTER TABLE item ADD COLUMN note text")
	require.NoError(t, err)
	c.waitConverged()
	_, err = before.Exec(ctx, "UPDATE item SET qty = qty + 1 WHERE id = 2")
	if err == nil {
		err = before.Commit(ctx)
	} else {
		_ = before.Rollback(ctx)
	}
	require.Error(t, err, "a write whose snapshot predates the ALTER TABLE must not commit")
	require.Equal(t, "40001", sqlstate(err), fmt.Sprint(err))

	after, err := b.Begin(ctx)
	require.NoError(t, err)
	_, err = after.Exec(ctx, "UPDATE item SET qty = qty + 1, note = 'x' WHERE id = 2")
	require.NoError(t, err)
	require.NoError(t, after.Commit(ctx))
	c.waitConverged()
	sum := c.checksum(0, "item")
	for i := 1; i < 3; i++ {
		require.Equal(t, sum, c.checksum(i, "item"))
	}
}

// TestExtendedProtocolCommitOutcome: drivers that send COMMIT through the
// extended protocol (pgjdbc; pgbench -M prepared parses it in a unit of its
// own) get the certification outcome when the COMMIT executes.
func TestExtendedProtocolCommitOutcome(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	setup := c.connect(0)
	_, err := setup.Exec(ctx, "CREATE TABLE hot (id int PRIMARY KEY, n int)")
	require.NoError(t, err)
	_, err = setup.Exec(ctx, "INSERT INTO hot VALUES (1, 0)")
	require.NoError(t, err)
	c.waitConverged()

	for _, separateParse := range []bool{true, false} {
		loser := c.connect(1).PgConn()
		exec := func(sql string) error {
			_, err := loser.Exec(ctx, sql).ReadAll()
			return err
		}
		require.NoError(t, exec("BEGIN"))
		require.NoError(t, exec("UPDATE hot SET n = n + 1 WHERE id = 1"))
		// The winner commits the same row through another node first.
		_, err := c.connect(2).Exec(ctx, "UPDATE hot SET n = n + 10 WHERE id = 1")
		require.NoError(t, err)
		c.waitConverged()

		var res *pgconn.ResultReader
		if separateParse {
			// Parse/Sync, then Bind/Execute/Sync (pgbench -M prepared).
			_, err := loser.Prepare(ctx, "commit_stmt", "COMMIT", nil)
			require.NoError(t, err, "parsing COMMIT must not fail: the outcome belongs to its execution")
			res = loser.ExecPrepared(ctx, "commit_stmt", nil, nil, nil)
		} else {
			// Parse/Bind/Execute/Sync in one unit (pgjdbc).
			res = loser.ExecParams(ctx, "COMMIT", nil, nil, nil, nil)
		}
		_, err = res.Close()
		require.Error(t, err, "separate parse %v: the conflicting COMMIT must fail", separateParse)
		require.Equal(t, "40001", sqlstate(err), "separate parse %v: %v", separateParse, err)
		require.Equal(t, byte('I'), loser.TxStatus(), "the transaction is over")
		// The connection keeps working.
		require.NoError(t, exec("SELECT 1"))
	}
	c.waitConverged()
	var n int
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT n FROM hot WHERE id = 1").Scan(&n))
	require.Equal(t, 20, n, "only the winners' updates are in")
}

// TestOnlyTheReplicatedDatabaseIsServed: a connection to another database
// is refused with a clear error, unless it is listed as local.
func TestOnlyTheReplicatedDatabaseIsServed(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm-si", func(cfg *config.Node) { cfg.LocalDatabases = []string{"scratch"} })
	ctx := context.Background()
	for _, db := range []string{"elsewhere", "scratch"} {
		_, err := c.direct(0).Exec(ctx, "CREATE DATABASE "+db)
		require.NoError(t, err)
	}
	_, err := pgconn.Connect(ctx, strings.Replace(c.dsn(0), "/postgres?", "/elsewhere?", 1))
	require.Error(t, err)
	require.Equal(t, "3D000", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "not replicated")

	local, err := pgconn.Connect(ctx, strings.Replace(c.dsn(0), "/postgres?", "/scratch?", 1))
	require.NoError(t, err, "a local database is relayed")
	defer local.Close(ctx)
	_, err = local.Exec(ctx, "CREATE TABLE scratchpad (id int); INSERT INTO scratchpad VALUES (1)").ReadAll()
	require.NoError(t, err)
	require.Zero(t, c.unreplicated(0), "writes to a local database are not replication leaks")
}

// TestSchemaFingerprintsAreCompared: after every DDL entry each node
// fingerprints its schema and the others compare at the same position;
// a schema change made behind Ordo's back on one node is reported by an
// on-demand check, naming the object that differs.
func TestSchemaFingerprintsAreCompared(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE fp (id int PRIMARY KEY, v text)")
	require.NoError(t, err)
	c.waitConverged()
	for i := range c.nodes {
		require.Eventually(t, func() bool {
			st := c.nodes[i].Replica().Schema()
			if len(st.Peers) != 2 {
				return false
			}
			for _, p := range st.Peers {
				if !p.Consistent || p.AtSeqno != st.AtSeqno {
					return false
				}
			}
			return true
		}, 10*time.Second, 50*time.Millisecond, "node %d compares its schema with both others after the DDL", i+1)
	}

	// Behind Ordo's back: node 3's PostgreSQL gets a column the others lack.
	_, err = c.direct(2).Exec(ctx, "ALTER TABLE fp ADD COLUMN sneaky int")
	require.NoError(t, err)
	at, err := c.nodes[0].Replica().RequestSchemaCheck(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p := c.nodes[0].Replica().Schema().Peers[3]
		return p.AtSeqno == at && !p.Consistent
	}, 10*time.Second, 50*time.Millisecond, "node 1 finds node 3's schema differs")
	p := c.nodes[0].Replica().Schema().Peers[3]
	require.Equal(t, []string{"table public.fp (different definition)"}, p.Differences)
	require.True(t, c.nodes[0].Replica().Schema().Peers[2].Consistent, "node 2 still matches node 1")
	require.Positive(t, c.counter(0, "ordo_schema_mismatches_total", nil))
}

// TestSchemaFingerprintsOfDDLInQuickSuccession: a fingerprint is taken
// off the delivery loop, and must still describe the schema at exactly its
// seqno. Clients on every node change the schema as fast as they can:
// every node's fingerprint at each DDL entry matches every other's, and
// none is missing when another node's arrives.
func TestSchemaFingerprintsOfDDLInQuickSuccession(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	const perNode = 12
	var wg sync.WaitGroup
	errs := make(chan error, 3*perNode)
	for i := range c.nodes {
		conn := c.connect(i)
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE quick%d (id int PRIMARY KEY)", i)); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perNode {
				if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE quick%d ADD COLUMN c%d int", i, k)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	c.waitConverged()
	want := float64(2 * 3 * (perNode + 1)) // every DDL entry, compared with both others
	for i := range c.nodes {
		count := func(result string) float64 {
			return c.counter(i, "ordo_schema_comparisons_total", map[string]string{"result": result})
		}
		require.Eventually(t, func() bool {
			return count("consistent") >= want || count("different")+count("unavailable") > 0
		}, 20*time.Second, 50*time.Millisecond, "node %d compares every fingerprint", i+1)
		require.Zero(t, count("different"), "node %d: fingerprints that differ", i+1)
		require.Zero(t, count("unavailable"), "node %d: others' fingerprints without its own", i+1)
		require.GreaterOrEqual(t, count("consistent"), want, "node %d", i+1)
	}
}

// TestAppliesFollowColumnTypeChanges: the appliers prepare their
// statements, whose parameter types PostgreSQL fixes when it prepares them.
// A column whose type changes (int to text here, the other way round next)
// must not be written with the old types by a remote node's applier.
func TestAppliesFollowColumnTypeChanges(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	a := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE morph (k int PRIMARY KEY, v int)",
		"INSERT INTO morph VALUES (1, 1)",
		"UPDATE morph SET v = 2 WHERE k = 1",
		"ALTER TABLE morph ALTER COLUMN v TYPE text",
		"INSERT INTO morph VALUES (2, 'two')",
		"UPDATE morph SET v = 'deux' WHERE k = 1",
		"ALTER TABLE morph ALTER COLUMN v TYPE numeric USING length(v)",
		"INSERT INTO morph VALUES (3, 3.5)",
		"UPDATE morph SET v = 4.25 WHERE k = 2",
	} {
		_, err := a.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for i := range c.nodes {
		require.NoError(t, c.nodes[i].Replica().Err(), "node %d", i+1)
		require.Equal(t, c.checksum(0, "morph"), c.checksum(i, "morph"), "node %d", i+1)
	}
}

// TestAlterTableFillsRowsAlikeOnEveryNode: an ALTER TABLE that gives the
// existing rows values computes them once, where it runs, and every node
// gets the same: a default that is not constant but not volatile either
// (now(), current_user, pg_backend_pid()), which PostgreSQL evaluates once
// and keeps for the existing rows, is replayed with the value the origin
// kept (before 2026-11-28 each node evaluated it at its own apply: the
// rows silently differed); a stored generated column is computed alike
// everywhere (it was refused); what gives each row or node a value of its
// own (a volatile default, an identity, USING random() or now()) is
// refused with an ordo: error.
func TestAlterTableFillsRowsAlikeOnEveryNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE f (k int PRIMARY KEY, v int)")
	require.NoError(t, err)
	c.waitConverged()
	for i := 0; i < 30; i++ { // rows written through every node, some updated
		_, err := c.connect(i%3).Exec(ctx, "INSERT INTO f VALUES ($1, $1)", 30-i)
		require.NoError(t, err)
	}
	c.waitConverged()
	_, err = c.connect(1).Exec(ctx, "UPDATE f SET v = v + 1 WHERE k % 2 = 0")
	require.NoError(t, err)
	c.waitConverged()
	for _, step := range []struct {
		sql     string
		refused bool
	}{
		{"ALTER TABLE f ADD COLUMN s serial", true},
		{"ALTER TABLE f ADD COLUMN idn bigint GENERATED ALWAYS AS IDENTITY", true},
		{"ALTER TABLE f ADD COLUMN r float DEFAULT random()", true},
		{"ALTER TABLE f ADD COLUMN n int DEFAULT 7", false},
		{"ALTER TABLE f ADD COLUMN made timestamptz NOT NULL DEFAULT now()", false},
		{"BEGIN; SELECT pg_sleep(0.05); ALTER TABLE f ADD COLUMN who text DEFAULT current_user, ADD COLUMN pid text DEFAULT pg_backend_pid()::text, ADD COLUMN at timestamptz DEFAULT statement_timestamp(); COMMIT", false},
		{"ALTER TABLE f ADD COLUMN g int GENERATED ALWAYS AS (k * 2) STORED", false},
		{"ALTER TABLE f ALTER COLUMN n TYPE text USING random()::text", true},
		{"ALTER TABLE f ALTER COLUMN v TYPE bigint USING v + (extract(epoch FROM now()) * 0)::int", true},
		{"ALTER TABLE f ALTER COLUMN v TYPE bigint USING v::bigint * 2", false},
	} {
		_, err := c.connect(0).Exec(ctx, step.sql)
		if step.refused {
			require.Error(t, err, step.sql)
			require.Equal(t, "0A000", sqlstate(err), "%s: %v", step.sql, err)
			require.Contains(t, err.Error(), "ordo:", step.sql)
		} else {
			require.NoError(t, err, step.sql)
		}
		c.waitConverged()
		sum := c.checksum(0, "f")
		for i := 1; i < 3; i++ {
			require.Equal(t, sum, c.checksum(i, "f"), "after %s node %d's rows differ", step.sql, i+1)
		}
	}
	// The defaults as written stay the defaults of new rows.
	var def string
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'f'::regclass AND adnum = (SELECT attnum FROM pg_attribute WHERE attrelid = 'f'::regclass AND attname = 'made')").Scan(&def))
	require.Equal(t, "now()", def)
	_, err = c.connect(2).Exec(ctx, "INSERT INTO f (k) VALUES (100)")
	require.NoError(t, err)
	c.waitConverged()
	for i := 1; i < 3; i++ {
		require.Equal(t, c.checksum(0, "f"), c.checksum(i, "f"))
	}
}

// TestMaterializedViewsAgreeUnderWrites: a materialized view's rows are
// not replicated; every node computes them when it carries out the
// REFRESH, the origin from its transaction's snapshot. A write to the
// tables the view reads, committed between that snapshot and the
// REFRESH's point of the order, would leave the nodes with different
// rows (before 2026-11-28 they differed after a few seconds of this):
// such a REFRESH now fails certification (40001) instead.
func TestMaterializedViewsAgreeUnderWrites(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE base (id serial PRIMARY KEY, v int); CREATE VIEW base_v AS SELECT v FROM base")
	require.NoError(t, err)
	_, err = c.connect(0).Exec(ctx, "CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n, coalesce(sum(v), 0) AS s FROM base_v")
	require.NoError(t, err)
	c.waitConverged()
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := c.connect(1)
		for time.Now().Before(stop) {
			_, _ = w.Exec(ctx, "INSERT INTO base (v) VALUES (1)")
		}
	}()
	r := c.connect(0)
	refreshed, conflicts := 0, 0
	for time.Now().Before(stop) {
		if _, err := r.Exec(ctx, "REFRESH MATERIALIZED VIEW mv"); err != nil {
			require.Equal(t, "40001", sqlstate(err), "%v", err)
			conflicts++
		} else {
			refreshed++
		}
	}
	wg.Wait()
	c.waitConverged()
	t.Logf("%d refreshes, %d failed certification", refreshed, conflicts)
	for i := 1; i < 3; i++ {
		require.Equal(t, c.checksum(0, "mv"), c.checksum(i, "mv"), "node %d's materialized view differs", i+1)
	}
	_, err = r.Exec(ctx, "REFRESH MATERIALIZED VIEW mv")
	require.NoError(t, err, "with no write beside it")
	c.waitConverged()
	var n int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT n FROM mv").Scan(&n))
	var rows int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT count(*) FROM base").Scan(&rows))
	require.Equal(t, rows, n)
}

// TestRowsAndDDLInterleavedInOneTransaction: a migration that changes rows
// and then the schema they were written under, in one transaction (copy a
// column, then drop it; insert, then rename the column), is applied on
// every node in the order it ran. The other nodes replayed every DDL
// statement before the rows: the rows then named a column the replay had
// dropped or renamed, no other node could apply the transaction, and the
// cluster voted its origin out.
func TestRowsAndDDLInterleavedInOneTransaction(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a := c.connect(0)
	exec := mustExec(t, a)
	inBlock := func(sqls ...string) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, a, func(tx pgx.Tx) error {
			for _, sql := range sqls {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return fmt.Errorf("%s: %w", sql, err)
				}
			}
			return nil
		}))
	}
	exec("CREATE TABLE mig (id int PRIMARY KEY, old int, new int)")
	exec("INSERT INTO mig VALUES (1, 10, NULL), (2, 20, NULL)")
	c.waitConverged()

	// Statements one by one in a block.
	inBlock(
		"UPDATE mig SET new = old",
		"ALTER TABLE mig DROP COLUMN old",
		"INSERT INTO mig VALUES (3, 30)",
		"ALTER TABLE mig RENAME COLUMN new TO v",
		"UPDATE mig SET v = v + 1 WHERE id = 3",
		"ALTER TABLE mig ADD COLUMN w int",
		"INSERT INTO mig VALUES (4, 40, 41)",
		// Its own rows come from the write set, after it.
		"CREATE TABLE mig_copy AS SELECT id, v FROM mig",
		"UPDATE mig_copy SET v = 0 WHERE id = 1",
		"ALTER TABLE mig_copy ADD PRIMARY KEY (id)",
	)
	// One query string, as a migration file sent whole.
	exec("INSERT INTO mig VALUES (5, 50, 51); ALTER TABLE mig DROP COLUMN w; UPDATE mig SET v = v * 10 WHERE id = 5")
	// An event trigger of the user's that fires before Ordo's (by name)
	// and fills each new table: its row comes before the table's record.
	exec(`CREATE TABLE seeded_log (t text PRIMARY KEY);
CREATE FUNCTION seed_new_table() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
	FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() WHERE object_type = 'table' AND schema_name = 'public' LOOP
		EXECUTE format('INSERT INTO %s (id, v) VALUES (0, -1)', r.object_identity);
		INSERT INTO seeded_log VALUES (r.object_identity);
	END LOOP;
END $$;
CREATE EVENT TRIGGER add_seed ON ddl_command_end WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION seed_new_table()`)
	inBlock(
		"UPDATE mig SET v = v + 1 WHERE id = 1",
		"CREATE TABLE seeded (id int PRIMARY KEY, v int)",
		"INSERT INTO seeded VALUES (1, 1)",
	)
	exec("DROP EVENT TRIGGER add_seed")
	exec("UPDATE mig SET v = v - 1 WHERE id = 1")

	// Every node goes on taking writes (without the fix, the others voted
	// the origin out: its writes failed with 25006).
	mustExec(t, c.connect(1))("INSERT INTO mig VALUES (6, 60)")
	exec("INSERT INTO mig VALUES (7, 70)")
	c.waitConverged()
	var sum int
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT sum(id * v) FROM mig").Scan(&sum))
	require.Equal(t, 1*10+2*20+3*31+4*40+5*500+6*60+7*70, sum)
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT sum(id * v) FROM mig_copy").Scan(&sum))
	require.Equal(t, 2*20+3*31+4*40, sum)
	for i := 1; i < 3; i++ {
		require.Equal(t, c.checksum(0, "mig"), c.checksum(i, "mig"), "node %d", i+1)
		require.Equal(t, c.checksum(0, "mig_copy"), c.checksum(i, "mig_copy"), "node %d", i+1)
		require.Equal(t, c.checksum(0, "seeded"), c.checksum(i, "seeded"), "node %d", i+1)
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM seeded").Scan(&n))
		require.Equal(t, 2, n, "node %d: the trigger's row and the insert", i+1)
		require.Zero(t, c.unreplicated(i))
	}
}
