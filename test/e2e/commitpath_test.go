package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbeFoldedIntoPrepare: a transaction that changed rows is probed
// in the round trip of its PREPARE (session, prepareAtOnce), and one the
// probe must see first falls back to the probe of its own, unchanged:
// a transaction that also changed large objects (they are read before the
// PREPARE), one in a session with a temporary schema Ordo had not seen
// (its writes to temporary tables commit here), one that touched a
// temporary table and a replicated one (refused as before). Labels are
// read from PostgreSQL and reset there either way.
func TestProbeFoldedIntoPrepare(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a := c.connect(0)
	prepares := func(how string) float64 {
		return c.counter(0, "ordo_session_prepares_total", map[string]string{"probe": how})
	}
	exec := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			_, err := a.Exec(ctx, sql)
			require.NoError(t, err, sql)
		}
	}
	exec("CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL)",
		"INSERT INTO acct VALUES (1, 100), (2, 100)",
		`CREATE FUNCTION mk_temp() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	CREATE TEMP TABLE IF NOT EXISTS scratch (x int);
	RETURN 1;
END $$`,
		`CREATE FUNCTION touch_temp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	CREATE TEMP TABLE IF NOT EXISTS trig_scratch (x int);
	INSERT INTO trig_scratch VALUES (NEW.id);
	RETURN NEW;
END $$`,
		"CREATE TABLE audited (id int PRIMARY KEY)",
		"CREATE TRIGGER audited_temp BEFORE INSERT ON audited FOR EACH ROW EXECUTE FUNCTION touch_temp()")
	c.waitConverged()

	// An autocommit update, labelled, and a block that changed rows:
	// probed with their PREPARE.
	at, apart := prepares("with_prepare"), prepares("apart")
	exec("SET ordo.txn_label = 'fold-1'", "UPDATE acct SET bal = bal - 1 WHERE id = 1")
	exec("BEGIN", "UPDATE acct SET bal = bal + 1 WHERE id = 2", "COMMIT")
	require.Equal(t, at+2, prepares("with_prepare"))
	var status, label string
	c.waitConverged() // (node 2 answers unknown until it has the commit: outcomes.md)
	require.NoError(t, c.connect(1).QueryRow(ctx, "SELECT _ordo.txn_status('fold-1')").Scan(&status))
	require.Equal(t, "committed", status)
	require.NoError(t, a.QueryRow(ctx, "SELECT coalesce(current_setting('ordo.txn_label', true), '')").Scan(&label))
	require.Empty(t, label, "the used label is reset in PostgreSQL")
	// A block that only read is probed apart (the check would refuse it).
	exec("BEGIN", "SELECT * FROM acct", "COMMIT")
	require.Equal(t, apart+1, prepares("apart"))
	c.waitConverged()

	// Rows and a large object in one transaction: the check refuses, the
	// probe finds the large object, and both reach the other nodes.
	fell := prepares("fell_back")
	exec("BEGIN", "SET LOCAL ordo.txn_label = 'lo-1'", "UPDATE acct SET bal = bal + 5 WHERE id = 1",
		"SELECT lo_from_bytea(4242, 'folded')", "COMMIT")
	c.waitConverged()
	var content []byte
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT lo_get(4242)").Scan(&content), "node 3 has the large object")
	require.Equal(t, "folded", string(content))
	require.Equal(t, fell+1, prepares("fell_back"))
	require.NoError(t, c.connect(2).QueryRow(ctx, "SELECT _ordo.txn_status('lo-1')").Scan(&status))
	require.Equal(t, "committed", status)

	// A session whose temporary schema a function created: its writes to
	// a temporary table commit here, through the fallback.
	s := c.connect(0)
	fell = prepares("fell_back")
	for _, sql := range []string{"BEGIN", "SELECT mk_temp()", "INSERT INTO scratch VALUES (1), (2)", "COMMIT"} {
		_, err := s.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	require.Equal(t, fell+1, prepares("fell_back"))
	var n int
	require.NoError(t, s.QueryRow(ctx, "SELECT count(*) FROM scratch").Scan(&n))
	require.Equal(t, 2, n)
	// From then on, its transactions are probed apart, by the full probe
	// alone (probeAlone): a labelled replicated write is replicated under
	// its label, writes to its temporary table and reads commit here, and
	// both in one transaction are refused.
	apart = prepares("apart")
	_, err := s.Exec(ctx, "UPDATE acct SET bal = bal + 1 WHERE id = 1")
	require.NoError(t, err)
	require.Equal(t, apart+1, prepares("apart"))
	for _, sql := range []string{"SET ordo.txn_label = 'temp-session-1'", "UPDATE acct SET bal = bal + 1 WHERE id = 2",
		"INSERT INTO scratch VALUES (3)", "BEGIN", "SELECT * FROM acct", "COMMIT"} {
		_, err := s.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	require.Equal(t, apart+4, prepares("apart"))
	require.NoError(t, s.QueryRow(ctx, "SELECT count(*) FROM scratch").Scan(&n))
	require.Equal(t, 3, n)
	c.waitConverged()
	require.NoError(t, c.connect(2).QueryRow(ctx, "SELECT _ordo.txn_status('temp-session-1')").Scan(&status))
	require.Equal(t, "committed", status, "the label of a write probed by the full probe alone")
	_, err = s.Exec(ctx, "UPDATE acct SET bal = bal + (SELECT count(*) FROM scratch) WHERE id = 2")
	require.Error(t, err)
	require.Equal(t, "0A000", sqlstate(err))
	require.Contains(t, err.Error(), "temporary")

	// A trigger that touches a temporary table under a replicated write:
	// refused as before, nothing committed.
	u := c.connect(0)
	_, err = u.Exec(ctx, "INSERT INTO audited VALUES (1)")
	require.Error(t, err)
	require.Equal(t, "0A000", sqlstate(err))
	require.Contains(t, err.Error(), "temporary")
	c.waitConverged()
	for i := range 3 {
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM audited").Scan(&n))
		require.Zero(t, n, "node %d", i+1)
	}
	// A label set where Ordo does not look (set_config), in a block whose
	// PREPARE fails (a deferred constraint): the abort is recorded under
	// it, as when the probe ran apart.
	exec("CREATE TABLE uniq (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)", "INSERT INTO uniq VALUES (1)")
	c.waitConverged()
	w := c.connect(1)
	for _, sql := range []string{"BEGIN", "SELECT set_config('ordo.txn_label', 'deferred-1', true)", "INSERT INTO uniq VALUES (1)"} {
		_, err := w.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err = w.Exec(ctx, "COMMIT")
	require.Equal(t, "23505", sqlstate(err))
	// (The abort is ordered in the background.)
	requireStatusSoon(t, c.dsn(2), "deferred-1", "aborted", "a deferred constraint failed at the commit")

	var bal1, bal2 int
	require.NoError(t, c.direct(1).QueryRow(ctx, "SELECT (SELECT bal FROM acct WHERE id = 1), (SELECT bal FROM acct WHERE id = 2)").Scan(&bal1, &bal2))
	require.Equal(t, []int{105, 102}, []int{bal1, bal2})
}
