package e2e

import (
	"context"
	"errors"
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

// TestAutocommitRetriesOutlastABurstOfConflicts: the retries of an
// autocommit statement pause between attempts, longer as they go on, so
// a statement that keeps losing while a row is hot spends its retries
// over a time that grows with their count, not within one burst of
// contention. The burst here is a trigger that raises 40001 (as a
// conflict does) until a time in a replicated row: 300 ms after the
// update that sets it. With 20 retries the statement commits (its
// pauses add up to at least 0.45 s); with 3 it is still in the burst
// after its last attempt and its client gets the 40001 (they add up to
// at most 3 ms, and the burst is 2 s). A cancel from the client while
// it waits to run again ends it with 57014. Without the pauses, 20 retries
// took milliseconds and the first statement failed too; a client on a
// hot row saw a retried statement fail in TestAutocommitConflictsAreRetried
// (CI, fe02681: 50 retries spent).
func TestAutocommitRetriesOutlastABurstOfConflicts(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, `CREATE TABLE burst (until timestamptz);
		INSERT INTO burst VALUES ('-infinity');
		CREATE TABLE hot (id int PRIMARY KEY, n int NOT NULL);
		INSERT INTO hot VALUES (1, 0);
		CREATE FUNCTION conflicted() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF clock_timestamp() < (SELECT until FROM burst) THEN
				RAISE EXCEPTION 'a conflict of the burst' USING ERRCODE = 'serialization_failure';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER conflicted BEFORE UPDATE ON hot FOR EACH ROW EXECUTE FUNCTION conflicted();`)
	require.NoError(t, err)
	c.waitConverged()
	conn := c.connect(1)
	burst := func(d time.Duration) {
		_, err := conn.Exec(ctx, fmt.Sprintf("UPDATE burst SET until = clock_timestamp() + interval '%d ms'", d.Milliseconds()))
		require.NoError(t, err)
	}
	update := func(retries int) (time.Duration, error) {
		_, err := conn.Exec(ctx, fmt.Sprintf("SET ordo.autocommit_retries = %d", retries))
		require.NoError(t, err)
		start := time.Now()
		_, err = conn.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = 1")
		return time.Since(start), err
	}
	retries := func() float64 { return c.counter(1, "ordo_session_autocommit_retries_total", nil) }

	before := retries()
	burst(2 * time.Second)
	took, err := update(3)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "3 retries, all within the burst")
	require.Equal(t, "40001", pe.Code)
	require.Equal(t, 3.0, retries()-before)
	t.Logf("3 retries: 40001 after %v", took)

	// A client's cancel while its statement waits to run again ends it,
	// as PostgreSQL would have canceled the attempt (57014): nothing
	// runs in PostgreSQL meanwhile for the cancel to hit.
	burst(3 * time.Second)
	canceled := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		canceled <- conn.PgConn().CancelRequest(ctx)
	}()
	took, err = update(100)
	require.NoError(t, <-canceled)
	require.ErrorAs(t, err, &pe, "canceled while it waited to run again")
	require.Equal(t, "57014", pe.Code, "%v after %v", err, took)
	t.Logf("100 retries, canceled: %s after %v", pe.Message, took)
	require.Equal(t, 1.0, c.counter(1, "ordo_session_autocommit_conflicts_unretried_total", map[string]string{"reason": "canceled"}))
	time.Sleep(3 * time.Second) // the rest of the burst

	before = retries()
	burst(300 * time.Millisecond)
	took, err = update(20)
	require.NoError(t, err, "20 retries outlast a burst of 300 ms")
	require.Positive(t, retries()-before)
	t.Logf("20 retries: committed after %v and %v retries", took, retries()-before)
	c.waitConverged()
	for i := range 2 {
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT n FROM hot WHERE id = 1").Scan(&n))
		require.Equal(t, 1, n, "node %d: the one increment that committed", i+1)
	}
}

// TestAutocommitConflictsAreRetried: autocommit increments of one row
// from two nodes at once, sent as simple queries and with the extended
// protocol as pgx sends it in each of its modes (Parse, Bind and Execute
// in one unit; a prepared statement bound by name; the unnamed statement
// described in one round trip and bound in the next), some with
// RETURNING n. Node 1 never retries (autocommit_retries 0), node 2
// retries, and a session on each sets its own (SET
// ordo.autocommit_retries): the retrying clients see no replication
// conflict where the others see many, every increment a client was told
// of is in the row exactly once, none other, and the values returned are
// those of the attempts that committed (no two alike).
func TestAutocommitConflictsAreRetried(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm-si", func(cfg *config.Node) {
		retries := 0
		if cfg.ID == 2 {
			retries = 50
		}
		cfg.AutocommitRetries = &retries
	})
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL); INSERT INTO counter VALUES (1, 0)")
	require.NoError(t, err)
	c.waitConverged()

	// Clients on both nodes: the second of two updates on one node waits
	// for the first's row lock and fails in PostgreSQL (REPEATABLE READ);
	// a client on the other node is aborted by certification or by the
	// apply that needs its lock. Two sessions set their own
	// ordo.autocommit_retries: one on node 1 retries, one on node 2
	// does not.
	const perClient = 40
	var mu sync.Mutex
	ok := map[bool]int{}                                   // by retrying
	failed := map[bool]map[string]int{false: {}, true: {}} // by retrying
	var wg sync.WaitGroup
	returned := map[int64]int{} // RETURNING n: how many increments returned each value
	clients := []struct {
		node      int
		mode      pgx.QueryExecMode
		returning bool
		set       string
	}{
		{1, pgx.QueryExecModeSimpleProtocol, false, ""}, {1, pgx.QueryExecModeExec, true, ""},
		{1, pgx.QueryExecModeCacheStatement, false, "50"},
		{2, pgx.QueryExecModeSimpleProtocol, true, ""}, {2, pgx.QueryExecModeExec, false, ""},
		{2, pgx.QueryExecModeCacheStatement, true, ""}, {2, pgx.QueryExecModeDescribeExec, false, ""},
		{2, pgx.QueryExecModeSimpleProtocol, false, "0"},
	}
	for _, cl := range clients {
		retrying := cl.set == "50" || cl.node == 2 && cl.set == ""
		conn := c.connect(cl.node - 1)
		if cl.set != "" {
			_, err := conn.Exec(ctx, "SET ordo.autocommit_retries = "+cl.set)
			require.NoError(t, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				// Bounded: a retry that stalls fails the test, not the run.
				sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				var tag pgconn.CommandTag
				var n int64
				var err error
				if cl.returning {
					tag = pgconn.NewCommandTag("UPDATE 1")
					err = conn.QueryRow(sctx, "UPDATE counter SET n = n + $1 WHERE id = 1 RETURNING n", cl.mode, 1).Scan(&n)
				} else {
					tag, err = conn.Exec(sctx, "UPDATE counter SET n = n + $1 WHERE id = 1", cl.mode, 1)
				}
				cancel()
				mu.Lock()
				what := fmt.Sprintf("node %d %s: ", cl.node, cl.mode)
				var pe *pgconn.PgError
				switch {
				case err == nil:
					if cl.returning {
						returned[n]++
					}
					if tag.String() != "UPDATE 1" {
						failed[retrying][what+"tag "+tag.String()]++
					} else {
						ok[retrying]++
					}
				case errors.As(err, &pe):
					msg, _, _ := strings.Cut(pe.Message, " (")
					failed[retrying][what+pe.Code+" "+msg]++
				default:
					failed[retrying][what+err.Error()]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.waitConverged()
	t.Logf("not retrying (3 sessions): %d committed, failures %v", ok[false], failed[false])
	t.Logf("retrying (5 sessions): %d committed, failures %v", ok[true], failed[true])
	var n int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n))
	require.Equal(t, ok[false]+ok[true], n, "every increment a client was told of, exactly once")
	for v, times := range returned {
		// The rows of the attempt that committed: increments of one row
		// are serialized, each returns its own value.
		require.Equal(t, 1, times, "value %d returned by %d increments", v, times)
		require.True(t, v >= 1 && v <= int64(n), "value %d returned, the row ends at %d", v, n)
	}
	require.NotEmpty(t, returned)
	require.Positive(t, 3*perClient-ok[false], "the clients that do not retry saw conflicts (else the test shows nothing)")
	// Why a conflict reached a retrying client, should one have.
	why := map[string]float64{}
	for i := range 2 {
		for _, reason := range []string{"rows_sent", "not_idle", "statement_changed", "result_changed", "recorded", "exhausted", "disabled"} {
			if v := c.counter(i, "ordo_session_autocommit_conflicts_unretried_total", map[string]string{"reason": reason}); v > 0 {
				why[fmt.Sprintf("node %d %s", i+1, reason)] = v
			}
		}
		for _, reason := range []string{"before_sync", "not_last"} {
			if v := c.counter(i, "ordo_wire_conflicts_relayed_unheld_total", map[string]string{"reason": reason}); v > 0 {
				why[fmt.Sprintf("node %d relayed %s", i+1, reason)] = v
			}
		}
		why[fmt.Sprintf("node %d retries", i+1)] = c.counter(i, "ordo_session_autocommit_retries_total", nil)
	}
	t.Logf("conflicts not run again, and why: %v", why)
	require.Empty(t, failed[true], "the others' conflicts were run again")
	require.Positive(t, why["node 2 retries"])
	require.Equal(t, float64(3*perClient-ok[false]), why["node 1 disabled"]+why["node 2 disabled"],
		"every conflict of a client that does not retry is counted as such")
	require.Equal(t, 5*perClient, ok[true])

	// A value it could not use is refused.
	_, err = c.connect(0).Exec(ctx, "SET ordo.autocommit_retries = 'many'")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22023", pe.Code)

	// The setting is PostgreSQL's, with PostgreSQL's rules. Node 1 does
	// not retry; conflictOnce's statement fails unless it is run again.
	watch := c.direct(0)
	conflictOnce := func(conn *pgx.Conn) error {
		holder := c.connect(0)
		defer holder.Close(ctx)
		for _, sql := range []string{"BEGIN", "UPDATE counter SET n = n + 1 WHERE id = 1"} {
			_, err := holder.Exec(ctx, sql)
			require.NoError(t, err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, "UPDATE counter SET n = n + 1 WHERE id = 1", pgx.QueryExecModeSimpleProtocol)
			done <- err
		}()
		require.Eventually(t, func() bool {
			var waiting int
			err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query = 'UPDATE counter SET n = n + 1 WHERE id = 1'").Scan(&waiting)
			return err == nil && waiting == 1
		}, 10*time.Second, 10*time.Millisecond, "the statement waits for the holder's row lock")
		_, err := holder.Exec(ctx, "COMMIT")
		require.NoError(t, err)
		return <-done
	}
	requireConflict := func(err error, why string) {
		require.ErrorAs(t, err, &pe, why)
		require.Equal(t, "40001", pe.Code, why)
	}
	conn := c.connect(0)
	show := func(conn *pgx.Conn) string {
		var v string
		require.NoError(t, conn.QueryRow(ctx, "SHOW ordo.autocommit_retries", pgx.QueryExecModeSimpleProtocol).Scan(&v))
		return v
	}
	require.Equal(t, "0", show(conn), "SHOW: the node's count")
	require.Equal(t, "50", show(c.connect(1)), "SHOW: the node's count")
	_, err = conn.Exec(ctx, "SET ordo.txn_label = 'conflicted-1'")
	require.NoError(t, err)
	requireConflict(conflictOnce(conn), "the node's autocommit_retries: 0")
	// (Its abort is ordered in the background: e2e -count=2 once read
	// unknown before it arrived.)
	requireStatusSoon(t, c.dsn(2), "conflicted-1", "aborted", "a labelled statement PostgreSQL aborted before its commit reached the order")
	// A label set_config set, where Ordo does not look: PostgreSQL's is
	// the one (the abort went unrecorded).
	_, err = conn.Exec(ctx, "SELECT set_config('ordo.txn_label', 'conflicted-2', false)")
	require.NoError(t, err)
	requireConflict(conflictOnce(conn), "a label set by set_config")
	requireStatusSoon(t, c.dsn(2), "conflicted-2", "aborted", "a label set by set_config")
	for _, sql := range []string{"BEGIN", "SET ordo.autocommit_retries = 5", "ROLLBACK"} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	requireConflict(conflictOnce(conn), "a SET in a block rolled back is undone")
	for _, sql := range []string{"BEGIN", "SET ordo.autocommit_retries = 5", "COMMIT"} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	require.NoError(t, conflictOnce(conn), "a SET in a block committed")
	require.Equal(t, "5", show(conn))
	_, err = conn.Exec(ctx, "RESET ordo.autocommit_retries")
	require.NoError(t, err)
	requireConflict(conflictOnce(conn), "RESET: the node's again")
	_, err = conn.Exec(ctx, "SELECT set_config('ordo.autocommit_retries', '5', false)")
	require.NoError(t, err)
	require.NoError(t, conflictOnce(conn), "set_config")
	withOption := c.connectWith(0, map[string]string{"ordo.autocommit_retries": "5"})
	require.NoError(t, conflictOnce(withOption), "a connection's own parameter")
	require.Equal(t, "5", show(withOption), "the connection's own, not the node's")
}

// TestJobQueueAcrossNodes: workers on two nodes take jobs with the usual
// job-queue statement, sent on its own (autocommit), `UPDATE … WHERE id =
// (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id`. Two workers on
// two nodes may lock the same job; certification aborts one, and its node
// runs the statement again, which takes another job. Every job is taken
// once, by the worker that was told it took it, and no worker hears of a
// conflict.
func TestJobQueueAcrossNodes(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm-si", func(cfg *config.Node) {
		retries := 100
		cfg.AutocommitRetries = &retries
	})
	ctx := context.Background()
	const jobs = 60
	_, err := c.connect(0).Exec(ctx, `CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL DEFAULT 'queued', worker int);
		INSERT INTO jobs (id) SELECT g FROM generate_series(1, 60) g`)
	require.NoError(t, err)
	c.waitConverged()

	var mu sync.Mutex
	took := map[int]int{} // job → the worker told it took it
	var problems []string
	var wg sync.WaitGroup
	for w, node := range []int{0, 1, 0, 1} {
		conn := c.connect(node)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				var id int
				err := conn.QueryRow(sctx, `UPDATE jobs SET state = 'taken', worker = $1
					WHERE id = (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
					RETURNING id`, w).Scan(&id)
				cancel()
				mu.Lock()
				switch {
				case errors.Is(err, pgx.ErrNoRows):
					mu.Unlock()
					return // the queue is empty (or every job left is locked: see below)
				case err != nil:
					problems = append(problems, fmt.Sprintf("worker %d: %v", w, err))
				case took[id] != 0:
					problems = append(problems, fmt.Sprintf("job %d taken by workers %d and %d", id, took[id]-1, w))
				default:
					took[id] = w + 1
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, problems)
	c.waitConverged()
	rows, err := c.direct(2).Query(ctx, "SELECT id, worker FROM jobs WHERE state = 'taken'")
	require.NoError(t, err)
	inTable := map[int]int{}
	for rows.Next() {
		var id, worker int
		require.NoError(t, rows.Scan(&id, &worker))
		inTable[id] = worker + 1
	}
	require.NoError(t, rows.Err())
	require.Equal(t, took, inTable, "the jobs each worker was told it took, and only those, are its in the table")
	// A worker that found the queue empty while another held the last
	// job's lock stopped early; the rest are still queued.
	var queued int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT count(*) FROM jobs WHERE state = 'queued'").Scan(&queued))
	require.Equal(t, jobs, len(took)+queued)
	t.Logf("%d jobs taken, %d left queued, retries on node 1: %v, node 2: %v", len(took), queued,
		c.counter(0, "ordo_session_autocommit_retries_total", nil), c.counter(1, "ordo_session_autocommit_retries_total", nil))
	require.Greater(t, len(took), jobs/2)
}
