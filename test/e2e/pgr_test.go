package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestPgrOriginKilledBeforeItsOutcome: under pgr a transaction is decided
// by the outcome its origin proposes once it certified it. Node 1's
// delivery loop is held in an apply (an ALWAYS trigger sleeps in node 1's
// applier only, switched on by a harmless setting of node 1's PostgreSQL,
// log_min_duration_statement: PostgreSQL 15 cannot ALTER SYSTEM a custom
// one), so node
// 1's own transaction is delivered to every node but never certified; node
// 1 is then killed with SIGKILL. The others must see it gone (Raft's
// failure detection, not a timer per transaction), order the abort, and
// go on committing; after a restart node 1 replays, rolls its prepared
// transaction back, and every node ends identical with nothing prepared.
func TestPgrOriginKilledBeforeItsOutcome(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "pgr")
	ctx := context.Background()
	run := func(node int, sql string, args ...any) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang fails the test
		defer cancel()
		conn, err := pgx.Connect(ctx, c.dsn(node))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql, args...)
		return err
	}
	for _, sql := range []string{
		"CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL)",
		`CREATE FUNCTION slow_apply() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF current_setting('log_min_duration_statement') <> '-1' AND current_setting('session_replication_role') = 'replica' THEN
				PERFORM pg_sleep(60);
			END IF;
			RETURN NEW;
		END $$`,
		"CREATE TRIGGER slow BEFORE INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION slow_apply()",
		"ALTER TABLE ledger ENABLE ALWAYS TRIGGER slow",
		"INSERT INTO ledger VALUES (0, 'before')",
	} {
		require.NoError(t, run(0, sql), sql)
	}
	require.Eventually(t, func() bool { return c.settled("SELECT count(*)::text FROM ledger") }, 30*time.Second, 200*time.Millisecond)

	// Node 1's applier now sleeps in the next remote insert.
	direct1, err := pgx.Connect(ctx, c.pg.Servers[0].DSN("postgres"))
	require.NoError(t, err)
	defer direct1.Close(ctx)
	_, err = direct1.Exec(ctx, "ALTER SYSTEM SET log_min_duration_statement = '1h'")
	require.NoError(t, err)
	_, err = direct1.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // backends pick the setting up between statements
	require.NoError(t, run(1, "INSERT INTO ledger VALUES (1, 'remote')"))
	require.Eventually(t, func() bool {
		var n int
		err := direct1.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'").Scan(&n)
		return err == nil && n == 1
	}, 20*time.Second, 100*time.Millisecond, "node 1's apply does not sleep")

	// Node 1's own transaction: proposed and delivered, never certified.
	done := make(chan error, 1)
	go func() { done <- run(0, "INSERT INTO ledger VALUES (2, 'never')") }()
	require.Eventually(t, func() bool {
		var n int
		err := direct1.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&n)
		return err == nil && n == 1
	}, 20*time.Second, 100*time.Millisecond, "node 1 did not prepare its transaction")
	time.Sleep(time.Second) // its entry reaches the order
	select {
	case err := <-done:
		t.Fatalf("node 1's transaction ended before its origin certified it: %v", err)
	default:
	}
	c.kill(0)
	require.Error(t, <-done, "its client loses its connection")

	// The others order its abort once Raft takes node 1 for gone, and go on.
	began := time.Now()
	require.NoError(t, run(2, "INSERT INTO ledger VALUES (3, 'after')"))
	took := time.Since(began)
	t.Logf("the next commit took %s after the origin was killed", took.Round(time.Millisecond))
	require.Less(t, took, 15*time.Second, "the dead origin's transaction held the cluster up")
	for i := 1; i < 3; i++ {
		require.Equal(t, 1.0, c.originGone(i), "node %d counts the abort of node 1's transaction", i+1)
	}

	// Node 1 comes back without the slow apply, replays and converges.
	_, err = direct1.Exec(ctx, "ALTER SYSTEM RESET log_min_duration_statement")
	require.NoError(t, err)
	_, err = direct1.Exec(ctx, "SELECT pg_reload_conf(), pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
	require.NoError(t, err)
	c.start(0)
	require.Eventually(t, func() bool {
		return c.settled("SELECT string_agg(id::text, ',' ORDER BY id) FROM ledger")
	}, 60*time.Second, 500*time.Millisecond, "nodes did not converge with nothing prepared:\n%s", c.state())
	var ids string
	require.NoError(t, direct1.QueryRow(ctx, "SELECT string_agg(id::text, ',' ORDER BY id) FROM ledger").Scan(&ids))
	require.Equal(t, "0,1,3", ids, "the dead origin's transaction is nowhere, the others everywhere")
	for i := range c.procs {
		require.Zero(t, c.metric(i, "ordo_capture_unreplicated_commits_total"), "node %d", i+1)
	}
}

// originGone returns how many remote transactions node i counted as
// aborted because their origin was gone.
func (c *procCluster) originGone(i int) float64 {
	total := 0.0
	for _, line := range c.scrape(i) {
		if !strings.HasPrefix(line, "ordo_replica_transactions_total{") || !strings.Contains(line, `reason="origin_gone"`) || !strings.Contains(line, `origin="remote"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(c.t, err)
		total += v
	}
	return total
}
