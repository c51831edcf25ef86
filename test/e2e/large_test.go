package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// gauge returns the value of an unlabelled gauge of node i.
func (c *cluster) gauge(i int, name string) float64 {
	mfs, err := c.nodes[i].Registry().Gather()
	require.NoError(c.t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	c.t.Fatalf("node %d exports no gauge %s", i+1, name)
	return 0
}

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
		require.Zero(t, c.gauge(i, "ordo_replica_fragment_bytes"), "node %d still holds fragments", i+1)
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
