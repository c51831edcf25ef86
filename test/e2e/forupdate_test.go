package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestRowLocksHoldAcrossNodes: SELECT … FOR UPDATE takes a row lock on
// one node only, so two transactions on two nodes could both lock a row
// (the job a queue hands out, the parent whose children a transaction
// counts) and commit. The rows a transaction locked are certified and
// recorded as if it wrote them: of two concurrent transactions that lock
// one row through two nodes, the second to commit aborts with 40001,
// under every certifying protocol and whatever else they write; locks on
// different rows do not conflict.
func TestRowLocksHoldAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm", "dbsm-si", "dbsm-rc", "pgr"} {
		t.Run(protocol, func(t *testing.T) {
			c := startCluster(t, 3, protocol)
			ctx := context.Background()
			for _, sql := range []string{
				"CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL)",
				"CREATE TABLE worklog (worker text, job int)",
				"INSERT INTO jobs VALUES (1, 'new'), (2, 'new')",
			} {
				_, err := c.connect(0).Exec(ctx, sql)
				require.NoError(t, err, sql)
			}
			c.waitConverged()
			a, b := c.connect(0), c.connect(1)
			take := func(conn *pgx.Conn, worker string, job int) pgx.Tx {
				t.Helper()
				tx, err := conn.Begin(ctx)
				require.NoError(t, err)
				var state string
				require.NoError(t, tx.QueryRow(ctx, "SELECT state FROM jobs WHERE id = $1 FOR UPDATE", job).Scan(&state))
				require.Equal(t, "new", state)
				// The job is processed elsewhere; only a log row is written.
				_, err = tx.Exec(ctx, "INSERT INTO worklog VALUES ($1, $2)", worker, job)
				require.NoError(t, err)
				return tx
			}
			t1, t2 := take(a, "a", 1), take(b, "b", 1)
			require.NoError(t, t1.Commit(ctx), "the first to commit holds the lock")
			err := t2.Commit(ctx)
			require.Error(t, err, "two nodes both held the row lock of job 1")
			require.Equal(t, "40001", sqlstate(err), "%v", err)

			t1, t2 = take(a, "a", 1), take(b, "b", 2)
			require.NoError(t, t1.Commit(ctx))
			require.NoError(t, t2.Commit(ctx), "locks on different rows do not conflict")

			c.waitConverged()
			for i := range c.nodes {
				var log string
				require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT string_agg(worker || job, ',' ORDER BY worker, job) FROM worklog").Scan(&log))
				require.Equal(t, "a1,a1,b2", log, "node %d", i+1)
			}
		})
	}
}

// TestTransactionsThatOnlyLockCommit: a transaction with an xid whose
// changes logical decoding does not carry (it only locked rows, took an
// ACCESS EXCLUSIVE lock, or called txid_current()) commits at once, and a
// session waiting for its lock goes on when it does. Its PREPARE used to
// be sent by no decoder: the commit waited 10 s for a write set, then
// failed.
func TestTransactionsThatOnlyLockCommit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	a, b := c.connect(0), c.connect(0)
	_, err := a.Exec(ctx, "create table locked(id int primary key, v int); insert into locked values (1, 0)")
	require.NoError(t, err)
	for _, sql := range []string{
		"begin; select * from locked where id = 1 for update; commit",
		"begin; select * from locked for share; commit",
		"begin; select txid_current(); commit",
		"begin; lock table locked in access exclusive mode; commit",
		"begin; select * from locked where id = 1 for update; update locked set v = v where id = -1; commit",
		// Rows changed and then rolled back, to a savepoint or with the
		// transaction, are not the transaction's: it only locked (its
		// PREPARE needs the mark). The second waited 10 s, then failed
		// with 40001 (the session fuzzer: an update, ROLLBACK and
		// SELECT … FOR UPDATE in one extended batch, below).
		"begin; savepoint s; update locked set v = v where id = 1; rollback to savepoint s; select * from locked where id = 1 for update; commit",
		"begin; update locked set v = v where id = 1; rollback and chain; select * from locked where id = 1 for update; commit",
	} {
		began := time.Now()
		out := simple(a.PgConn(), sql)
		require.NotContains(t, out, "error", sql)
		require.Less(t, time.Since(began), 5*time.Second, sql)
	}
	batch := &pgconn.Batch{}
	for _, sql := range []string{"update locked set v = v where id = 1 returning v", "rollback", "select * from locked where id = 1 for update"} {
		batch.ExecParams(sql, nil, nil, nil, nil)
	}
	began := time.Now()
	_, err = a.PgConn().ExecBatch(ctx, batch).ReadAll()
	require.NoError(t, err)
	require.Less(t, time.Since(began), 5*time.Second)
	// pgjdbc's StatementTest.warningsAreAvailableAsap: b waits in
	// autocommit for the lock a holds; a's COMMIT releases it.
	_, err = a.Exec(ctx, "begin")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "lock table locked in access exclusive mode")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, "update locked set v = v + 1 where id = 1")
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	_, err = a.Exec(ctx, "commit")
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the update still waits for the lock of a committed transaction")
	}
	c.waitConverged()
	for i := range 3 {
		var v int
		require.NoError(t, c.direct(i).QueryRow(ctx, "select v from locked where id = 1").Scan(&v))
		require.Equal(t, 1, v, "node %d", i+1)
	}

	// The message that makes decoding send such a PREPARE is written only
	// when the transaction's statements changed no rows: another consumer
	// of the node's logical decoding (test_decoding here) sees none in a
	// transaction that wrote.
	d := c.direct(0)
	_, err = d.Exec(ctx, "select pg_create_logical_replication_slot('peek', 'test_decoding')")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "update locked set v = v + 1 where id = 1")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "begin; select * from locked for update; commit")
	require.NoError(t, err)
	// Its commit is answered before the node's COMMIT PREPARED
	// (performance.md, "The commit's last flush"), and test_decoding
	// shows a prepared transaction only once committed: a read through
	// the node waits for that commit to be visible.
	require.NoError(t, a.QueryRow(ctx, "select count(*) from locked").Scan(new(int)))
	var marks, updates int
	require.NoError(t, d.QueryRow(ctx, `select count(*) filter (where data like '%ordo.mark%'), count(*) filter (where data like 'table public.locked: UPDATE%')
		from pg_logical_slot_peek_changes('peek', null, null)`).Scan(&marks, &updates))
	require.Equal(t, 1, updates)
	require.Equal(t, 1, marks, "one mark, for the transaction that only locked")
	_, err = d.Exec(ctx, "select pg_drop_replication_slot('peek')")
	require.NoError(t, err)
}
