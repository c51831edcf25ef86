package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// TestDataCheckNamesTheDifference: a data check compares every node's
// rows at one position of the order. Identical nodes are reported
// consistent; a row changed behind Ordo's back on one node is reported
// with its table and the keys of its bucket.
func TestDataCheckNamesTheDifference(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE dc (id int PRIMARY KEY, v text, at timestamptz, f float8)",
		"INSERT INTO dc SELECT g, 'v' || g, '2026-01-01'::timestamptz + g * interval '1 hour', g / 3.0 FROM generate_series(1, 200) g",
		"CREATE TABLE dc_nokey (v text)",
		"INSERT INTO dc_nokey VALUES ('a'), ('b')",
		"SELECT lo_from_bytea(0, 'a large object')",
		"BEGIN; SELECT lo_create(7007); GRANT SELECT ON LARGE OBJECT 7007 TO PUBLIC; COMMIT",
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	check := func() map[uint32]string {
		seqno, err := c.nodes[0].Replica().RequestDataCheck(ctx)
		require.NoError(t, err)
		var got map[uint32]string
		require.Eventually(t, func() bool {
			st := c.nodes[0].Replica().Data()
			if st.AtSeqno != seqno {
				return false
			}
			got = map[uint32]string{}
			for node, p := range st.Peers {
				if p.AtSeqno == seqno {
					got[node] = strings.Join(p.Differences, "\n")
				}
			}
			return len(got) == 2
		}, 30*time.Second, 50*time.Millisecond)
		return got
	}
	require.Equal(t, map[uint32]string{2: "", 3: ""}, check(), "identical nodes")

	// Behind Ordo's back, on node 3 only.
	_, err := c.direct(2).Exec(ctx, "UPDATE dc SET v = 'tampered' WHERE id = 42")
	require.NoError(t, err)
	got := check()
	require.Empty(t, got[2])
	var bucket int
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT abs(hashtext(ROW(42)::text)) % 16").Scan(&bucket))
	require.Contains(t, got[3], fmt.Sprintf("table public.dc, key bucket %d:", bucket), "the bucket of key 42")
	require.NotContains(t, got[3], "dc_nokey")
	require.Equal(t, 1, strings.Count(got[3], "\n")+1, "one bucket differs: %s", got[3])
	t.Logf("node 3: %s", got[3])
	consistent := c.counter(0, "ordo_data_consistent", nil)
	require.Zero(t, consistent, "ordo_data_consistent drops to 0")
	require.Equal(t, 1.0, c.counter(0, "ordo_data_mismatches_total", nil))

	// A large object changed behind Ordo's back, on node 2.
	_, err = c.direct(1).Exec(ctx, "SELECT lo_put(7007, 0, 'x')")
	require.NoError(t, err)
	got = check()
	require.Contains(t, got[2], "table pg_catalog.pg_largeobject, key bucket")
	require.Contains(t, got[3], "table public.dc")
	require.NotContains(t, got[3], "pg_largeobject")
}

// TestScheduledDataCheck: with data_check_interval set, the cluster checks
// its data by itself, once per interval (the leader asks), and a row
// changed behind Ordo's back is reported without anyone asking.
func TestScheduledDataCheck(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm-si", func(cfg *config.Node) { cfg.DataCheckInterval = 2 * time.Second })
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE sdc (id int PRIMARY KEY, v text)")
	require.NoError(t, err)
	_, err = c.connect(0).Exec(ctx, "INSERT INTO sdc SELECT g, 'v' FROM generate_series(1, 50) g")
	require.NoError(t, err)
	c.waitConverged()
	_, err = c.direct(2).Exec(ctx, "UPDATE sdc SET v = 'tampered' WHERE id = 7")
	require.NoError(t, err)
	start := time.Now()
	var diff string
	require.Eventually(t, func() bool {
		p := c.nodes[0].Replica().Data().Peers[3]
		diff = strings.Join(p.Differences, "\n")
		return strings.Contains(diff, "table public.sdc")
	}, 30*time.Second, 100*time.Millisecond, "no scheduled check found the change")
	t.Logf("found after %s: %s", time.Since(start).Round(100*time.Millisecond), diff)

	// One check per interval for the cluster, not one per node.
	time.Sleep(6 * time.Second)
	checks := int(c.counter(0, "ordo_data_checks_total", nil))
	require.GreaterOrEqual(t, checks, 3)
	require.LessOrEqual(t, checks, 9, "about one check per 2 s over the test's ~10 s: %d", checks)
}
