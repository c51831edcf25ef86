package e2e

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestTablesWithoutPrimaryKey: a table without a primary key is updated
// and deleted from through any node, as on PostgreSQL (compatibility.md,
// cause 7: pgjdbc's and psycopg's suites, and many applications, use such
// tables). Ordo makes such tables REPLICA IDENTITY FULL on every node, so
// PostgreSQL logs the whole old row, which keys the row for certification
// and finds it on the other nodes.
func TestTablesWithoutPrimaryKey(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	n1, n2 := c.connect(0), c.connect(1)
	for _, sql := range []string{
		// pgjdbc's AutoRollbackTest and psycopg's test_misc_statement.
		"create table np(num int)",
		"insert into np values (1)",
		"update np set num = num * 2",
		"CREATE TABLE log (at int, msg text, doc jsonb)",
		"INSERT INTO log VALUES (1, 'a', '{}'), (1, 'a', '{}'), (2, NULL, NULL), (3, 'c', '[1, 2.0]')",
		// A table that had a primary key and lost it.
		"CREATE TABLE was_keyed (id int PRIMARY KEY, v int)",
		"INSERT INTO was_keyed VALUES (1, 1), (2, 2)",
		"ALTER TABLE was_keyed DROP CONSTRAINT was_keyed_pkey",
		// Created, filled and changed in one transaction (psycopg's
		// test_prepared: its connections are not in autocommit).
		"BEGIN; CREATE TABLE same_txn (num int); INSERT INTO same_txn VALUES (1), (2); UPDATE same_txn SET num = num * 10; DELETE FROM same_txn WHERE num = 20; COMMIT",
	} {
		_, err := n1.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for _, sql := range []string{
		"update np set num = num + 1",
		"DELETE FROM log WHERE ctid = (SELECT min(ctid) FROM log WHERE at = 1)",
		"UPDATE log SET msg = 'was null' WHERE at = 2",
		"UPDATE log SET doc = doc || '[3]' WHERE at = 3",
		"UPDATE was_keyed SET v = v * 10",
		"DELETE FROM was_keyed WHERE id = 1",
	} {
		_, err := n2.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	var num int
	require.NoError(t, c.connect(2).QueryRow(ctx, "SELECT num FROM np").Scan(&num))
	require.Equal(t, 3, num)
	for _, tbl := range []string{"np", "log", "was_keyed", "same_txn"} {
		want := c.checksum(0, tbl)
		for i := range c.nodes {
			require.Equal(t, want, c.checksum(i, tbl), "node %d: %s differs", i+1, tbl)
			var ident string
			require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT relreplident::text FROM pg_class WHERE oid = $1::regclass", tbl).Scan(&ident))
			require.Equal(t, "f", ident, "node %d: %s", i+1, tbl)
		}
	}
	var rows int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT count(*) FROM log").Scan(&rows))
	require.Equal(t, 3, rows, "exactly one of the two identical rows was deleted")

	// Two nodes updating the same row concurrently: one commits, the
	// other is told to retry, and every node ends with the winner's value.
	t1, err := n1.Begin(ctx)
	require.NoError(t, err)
	t2, err := n2.Begin(ctx)
	require.NoError(t, err)
	_, err = t1.Exec(ctx, "update np set num = 100")
	require.NoError(t, err)
	_, err = t2.Exec(ctx, "update np set num = 200")
	require.NoError(t, err)
	err1, err2 := t1.Commit(ctx), t2.Commit(ctx)
	var pe *pgconn.PgError
	switch {
	case err1 == nil && err2 != nil:
		require.True(t, errors.As(err2, &pe), "%v", err2)
		require.Equal(t, "40001", pe.Code)
		num = 100
	case err2 == nil && err1 != nil:
		require.True(t, errors.As(err1, &pe), "%v", err1)
		require.Equal(t, "40001", pe.Code)
		num = 200
	default:
		t.Fatalf("concurrent updates of one row: first %v, second %v (exactly one must commit)", err1, err2)
	}
	c.waitConverged()
	for i := range c.nodes {
		var got int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT num FROM np").Scan(&got))
		require.Equal(t, num, got, "node %d", i+1)
		require.Zero(t, c.unreplicated(i))
	}
}

// TestUnloggedTablesAreCreatedLogged: CREATE UNLOGGED TABLE (psycopg's
// and pgjdbc's test fixtures, caches in applications) creates a regular
// table, replicated like any other, and says so in a notice: logical
// decoding carries no rows of an unlogged table, so it would silently
// differ between nodes (compatibility.md, cause 8). ALTER TABLE … SET
// UNLOGGED keeps the table logged.
func TestUnloggedTablesAreCreatedLogged(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(c.dsn(0))
	require.NoError(t, err)
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	o, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer o.Close(ctx)
	tx, err := o.Begin(ctx)
	require.NoError(t, err)
	for _, sql := range []string{
		"create unlogged table ul (k int primary key, v text)", // extended protocol, in a block
		"insert into ul values (1, 'one'), (2, 'two')",
		"create unlogged table ul_as as select k, v from ul",
		"alter table ul set unlogged",
	} {
		_, err := tx.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	require.NoError(t, tx.Commit(ctx))
	res := o.PgConn().Exec(ctx, "create unlogged table ul2 (k int)")
	_, err = res.ReadAll()
	require.NoError(t, err)
	require.Len(t, notices, 4, "%q", notices)
	for _, n := range notices {
		require.Contains(t, n, "not UNLOGGED")
	}
	// In a query string with other statements it cannot be rewritten: refused.
	_, err = o.PgConn().Exec(ctx, "create unlogged table ul3 (k int); insert into ul values (3, 'three')").ReadAll()
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, "0A000", pe.Code)
	require.Contains(t, pe.Message, "on its own")
	c.waitConverged()
	for i := range c.nodes {
		var kinds string
		require.NoError(t, c.direct(i).QueryRow(ctx,
			"select string_agg(relname || ' ' || relpersistence::text, ', ' order by relname) from pg_class where relname in ('ul', 'ul_as', 'ul2', 'ul3')").Scan(&kinds))
		require.Equal(t, "ul p, ul2 p, ul_as p", kinds, "node %d", i+1)
		require.Equal(t, c.checksum(0, "ul"), c.checksum(i, "ul"), "node %d", i+1)
		require.Equal(t, c.checksum(0, "ul_as"), c.checksum(i, "ul_as"), "node %d", i+1)
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "select count(*) from ul_as").Scan(&n))
		require.Equal(t, 2, n, "node %d", i+1)
	}
}
