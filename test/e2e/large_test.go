package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// TestLargeTransactionsTravelInFragments: with max_entry_bytes at 64 KiB,
// transactions of a few MB are replicated as dozens of fragments and land
// whole, once, on every node. Their keys are escalated to whole tables
// (key_escalation_rows 1000), and still every real conflict is caught: a
// large UPDATE against a single-row update of the same table on another
// node, a large DELETE of parent rows against a child insert referencing
// one of them; exactly one of each pair commits, the other gets 40001, the
// fragments of the loser are forgotten, and no node holds any fragment
// afterwards.
func TestLargeTransactionsTravelInFragments(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm-si", func(n *config.Node) {
		n.MaxEntryBytes = 64 << 10
		n.KeyEscalationRows = 1000
	})
	ctx := context.Background()
	a, b := c.connect(0), c.connect(1)
	_, err := a.Exec(ctx, `CREATE TABLE big (id int PRIMARY KEY, n int, pad text);
		CREATE TABLE parent (id int PRIMARY KEY);
		CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent)`)
	require.NoError(t, err)

	_, err = a.Exec(ctx, "INSERT INTO big SELECT g, 0, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g")
	require.NoError(t, err, "a 20,000-row insert through node 1")
	_, err = b.Exec(ctx, "INSERT INTO parent SELECT g FROM generate_series(1, 3000) g")
	require.NoError(t, err, "a 3,000-row insert through node 2")
	c.waitConverged()
	fragments := c.counter(0, "ordo_replica_fragments_proposed_total", nil)
	require.Greater(t, fragments, 30.0, "2.5 MB in 64 KiB entries")
	for i := range c.nodes {
		var n, sum int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*), sum(id) FROM big").Scan(&n, &sum))
		require.Equal(t, 20000, n, "node %d", i+1)
		require.Equal(t, 20000*20001/2, sum, "node %d", i+1)
	}

	// Both orders of arrival are likely: the large UPDATE's fragments take
	// dozens of round trips while the small one is a single entry.
	for r := 1; r <= 3; r++ {
		n := c.commitConcurrently("large and small update", a, b,
			fmt.Sprintf("UPDATE big SET n = n + %d", r), fmt.Sprintf("UPDATE big SET n = n - 1 WHERE id = %d", r*7))
		require.Equal(t, 1, n, "round %d: a whole-table update and a row update on another node: one commits", r)
	}
	n := c.commitConcurrently("large parent delete and child insert", a, b,
		"DELETE FROM parent WHERE id > 1000", "INSERT INTO child VALUES (1, 2999)")
	require.Equal(t, 1, n, "deleting 2,000 parents and inserting a child of one of them: one commits")

	c.waitConverged()
	for i := range c.nodes {
		var orphans int
		require.NoError(t, c.direct(i).QueryRow(ctx,
			"SELECT count(*) FROM child LEFT JOIN parent p ON p.id = child.parent_id WHERE p.id IS NULL").Scan(&orphans))
		require.Zero(t, orphans, "node %d", i+1)
		require.Zero(t, c.counter(i, "ordo_replica_fragment_bytes", nil), "node %d still holds fragments", i+1)
		require.Zero(t, c.unreplicated(i), "node %d", i+1)
	}
	for _, tbl := range []string{"big", "parent", "child"} {
		sum := c.checksum(0, tbl)
		for i := 1; i < len(c.nodes); i++ {
			require.Equal(t, sum, c.checksum(i, tbl), "%s differs on node %d", tbl, i+1)
		}
	}
}

// TestReadSetsEscalateToTables: under dbsm, a transaction that reads more
// rows by key than key_escalation_rows is certified as reading their whole
// table (DESIGN.md "Read sets"): a concurrent write of another row of that
// table on another node then aborts it, while one that read few rows
// commits beside the same write.
func TestReadSetsEscalateToTables(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm", func(n *config.Node) { n.KeyEscalationRows = 3 })
	ctx := context.Background()
	a, b := c.connect(0), c.connect(1)
	_, err := a.Exec(ctx, "CREATE TABLE acct (id int PRIMARY KEY, bal int); CREATE TABLE audit (id serial PRIMARY KEY, note text)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO acct SELECT g, 100 FROM generate_series(1, 10) g")
	require.NoError(t, err)
	c.waitConverged()

	// One point read per statement: each is one row key.
	reader := func(ids ...int) string {
		q := ""
		for _, id := range ids {
			q += fmt.Sprintf("SELECT bal FROM acct WHERE id = %d; ", id)
		}
		return q + "INSERT INTO audit (note) VALUES ('seen')"
	}
	// The writer commits first, so the reader is certified against it.
	readerAfterWriter := func(reads []int, writeID int) error {
		ra, err := a.Begin(ctx)
		require.NoError(t, err)
		wb, err := b.Begin(ctx)
		require.NoError(t, err)
		_, err = ra.Exec(ctx, reader(reads...))
		require.NoError(t, err)
		_, err = wb.Exec(ctx, fmt.Sprintf("UPDATE acct SET bal = 0 WHERE id = %d", writeID))
		require.NoError(t, err)
		require.NoError(t, wb.Commit(ctx))
		return ra.Commit(ctx)
	}
	require.NoError(t, readerAfterWriter([]int{1, 2}, 9), "2 read keys stay row keys: no conflict with row 9")
	err = readerAfterWriter([]int{1, 2, 3, 4, 5}, 10)
	require.Equal(t, "40001", sqlstate(err), "5 read keys escalate to the table, which row 10's write conflicts with: %v", err)
	require.ErrorContains(t, err, "conflict on public.acct ")
	c.waitConverged()
	for i := 1; i < len(c.nodes); i++ {
		require.Equal(t, c.checksum(0, "audit"), c.checksum(i, "audit"), "node %d", i+1)
	}
}

// TestKillDuringFragments: SIGKILL in the middle of a transaction that
// travels as hundreds of fragments. A node that only receives them is
// killed first: the origin goes on with the other node, commits, and the
// restarted node replays the fragments from its log and applies the whole
// transaction. Then the origin itself is killed mid-fragments: its client
// gets a connection error, the restarted origin orders the abort of its
// leftover prepared transaction, and no node applies any of it or holds
// its fragments. Every node ends identical with nothing prepared.
func TestKillDuringFragments(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "dbsm-si", "max_entry_bytes: 65536")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE ledger (id int PRIMARY KEY, batch int, pad text)")
	require.NoError(t, err)
	conn.Close(ctx)

	// insert runs one large transaction through node 0 in the background.
	insert := func(batch int) chan error {
		done := make(chan error, 1)
		go func() {
			cn, err := pgx.Connect(ctx, c.dsn(0))
			if err != nil {
				done <- err
				return
			}
			defer cn.Close(ctx)
			_, err = cn.Exec(ctx, fmt.Sprintf(`INSERT INTO ledger SELECT g + %d, %d, repeat(md5(g::text), 3)
				FROM generate_series(1, 100000) g`, batch*1000000, batch))
			done <- err
		}()
		return done
	}
	// midFragments waits until node i holds fragments.
	midFragments := func(i int, done chan error) {
		deadline := time.Now().Add(60 * time.Second)
		for c.metric(i, "ordo_replica_fragment_bytes") == 0 {
			select {
			case err := <-done:
				t.Fatalf("the transaction ended before node %d held any fragment: %v", i+1, err)
			default:
			}
			require.True(t, time.Now().Before(deadline), "node %d never held fragments:\n%s", i+1, c.state())
			time.Sleep(10 * time.Millisecond)
		}
	}
	countEverywhere := "SELECT count(*) || ':' || coalesce(md5(string_agg(id::text, ',' ORDER BY id)), '') FROM ledger"

	// A receiver dies mid-fragments: the transaction commits without it,
	// and it catches up from its log.
	done := insert(1)
	midFragments(2, done)
	c.kill(2)
	require.NoError(t, <-done, "the origin commits with one node down")
	c.start(2)
	require.Eventually(t, func() bool { return c.settled(countEverywhere) }, 90*time.Second, 500*time.Millisecond,
		"nodes did not converge after the receiver's restart:\n%s", c.state())
	for i := range c.procs {
		require.Zero(t, c.metric(i, "ordo_replica_fragment_bytes"), "node %d holds fragments", i+1)
	}

	// The origin dies mid-fragments: nowhere.
	done = insert(2)
	midFragments(1, done)
	c.kill(0)
	err = <-done
	require.Error(t, err, "the client of a killed node gets an error")
	c.start(0)
	require.Eventually(t, func() bool { return c.settled(countEverywhere) }, 90*time.Second, 500*time.Millisecond,
		"nodes did not converge after the origin's restart:\n%s", c.state())
	for i := range c.procs {
		require.Zero(t, c.metric(i, "ordo_replica_fragment_bytes"), "node %d still holds the dead transaction's fragments", i+1)
		require.Zero(t, c.metric(i, "ordo_capture_unreplicated_commits_total"), "node %d", i+1)
	}
	d, err := pgx.Connect(ctx, c.pg.Servers[1].DSN("postgres"))
	require.NoError(t, err)
	defer d.Close(ctx)
	var first, second int
	require.NoError(t, d.QueryRow(ctx, "SELECT count(*) FILTER (WHERE batch = 1), count(*) FILTER (WHERE batch = 2) FROM ledger").Scan(&first, &second))
	require.Equal(t, 100000, first, "the first transaction, whole")
	require.Zero(t, second, "the killed origin's transaction, nowhere")
}
