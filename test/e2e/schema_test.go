package e2e

import (
	"context"
	"math"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestPgbenchThroughTheCluster: `pgbench -i` through node 1 (DDL, COPY,
// VACUUM, ALTER TABLE … ADD PRIMARY KEY), then pgbench through nodes 2 and
// 3 at once; tables, indexes and contents end identical everywhere.
func TestPgbenchThroughTheCluster(t *testing.T) {
	t.Parallel()
	pgbench, err := exec.LookPath("pgbench")
	require.NoError(t, err, "pgbench is needed (make test installs postgresql-client)")
	c := startCluster(t, 3, "dbsm-si")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	out, err := exec.CommandContext(ctx, pgbench, "-i", "-s", "1", "-q", c.dsn(0)).CombinedOutput()
	require.NoError(t, err, "pgbench -i: %s", out)
	t.Logf("pgbench -i: %s", lastLines(string(out), 1))
	c.waitConverged() // pgbench reads the scale from pgbench_branches

	var wg sync.WaitGroup
	outs := make([]string, 3)
	for i := 1; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", "2", "-T", "5", "--max-tries", "20", "-M", []string{"", "simple", "prepared"}[i], c.dsn(i))
			o, err := cmd.CombinedOutput()
			if err != nil {
				outs[i] = "error: " + err.Error() + "\n" + string(o)
			} else {
				outs[i] = string(o)
			}
		}()
	}
	wg.Wait()
	for i := 1; i < 3; i++ {
		require.NotContains(t, outs[i], "error:", "pgbench through node %d:\n%s", i+1, outs[i])
		require.Contains(t, outs[i], "number of transactions actually processed", outs[i])
		require.NotContains(t, outs[i], "actually processed: 0/", outs[i])
		t.Logf("node %d: %s", i+1, lastLines(outs[i], 3))
	}
	c.waitConverged()

	for _, table := range []string{"pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"} {
		sum := c.checksum(0, table)
		for i := 1; i < 3; i++ {
			require.Equal(t, sum, c.checksum(i, table), "%s differs on node %d", table, i+1)
		}
	}
	schema := func(i int) string {
		var s string
		require.NoError(t, c.direct(i).QueryRow(ctx, `SELECT string_agg(tablename || ':' || indexdef, E'\n' ORDER BY indexdef)
			FROM pg_indexes WHERE schemaname = 'public'`).Scan(&s))
		return s
	}
	require.Contains(t, schema(0), "pgbench_accounts_pkey")
	for i := 1; i < 3; i++ {
		require.Equal(t, schema(0), schema(i), "indexes differ on node %d", i+1)
		require.Zero(t, c.unreplicated(i))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// TestSequencesNeverCollide: 3 nodes × 4 clients insert into a SERIAL
// table at once; no id is handed out twice and every node ends with the
// same rows; under dbsm-si, pgr and cons.
func TestSequencesNeverCollide(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm-si", "pgr", "cons"} {
		t.Run(protocol, func(t *testing.T) { sequencesNeverCollide(t, protocol) })
	}
}

func sequencesNeverCollide(t *testing.T, protocol string) {
	c := startCluster(t, 3, protocol)
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE events (id serial PRIMARY KEY, node int NOT NULL, at timestamptz DEFAULT now())")
	require.NoError(t, err)
	c.waitConverged()

	duration := 5 * time.Second
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := 0; i < 12; i++ {
		conn := c.connect(i % 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := conn.Exec(ctx, "INSERT INTO events (node) VALUES ($1)", i%3+1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "an insert failed: ids collided or replication refused it")
	}
	c.waitConverged()
	var n, distinct int
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM events").Scan(&n, &distinct))
	require.Positive(t, n)
	require.Equal(t, n, distinct)
	var wrongNode int
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT count(*) FROM events WHERE id % 100 <> node").Scan(&wrongNode))
	require.Zero(t, wrongNode, "every id is ≡ its node's offset modulo the stride")
	sum := c.checksum(0, "events")
	for i := 1; i < 3; i++ {
		require.Equal(t, sum, c.checksum(i, "events"), "node %d differs", i+1)
	}
	t.Logf("%d rows inserted through 3 nodes", n)
}

// TestSetvalMovesEveryNode: rows loaded with explicit ids through one node
// followed by setval (what a pg_dump restore does) leave every node's
// sequence above them, so inserts on other nodes do not collide with the
// loaded rows; setval to a lower value is carried too; each node stays in
// its own residue class.
func TestSetvalMovesEveryNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a := c.connect(0)
	_, err := a.Exec(ctx, "CREATE TABLE loaded (id serial PRIMARY KEY, v text); CREATE SEQUENCE free_seq")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO loaded (id, v) SELECT g, 'x' FROM generate_series(1, 5000) g")
	require.NoError(t, err)
	// Autocommit, through the simple protocol, as pg_dump's script has it.
	_, err = a.Exec(ctx, "SELECT pg_catalog.setval('public.loaded_id_seq', 5000, true)", pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	// In a transaction block, through the extended protocol.
	tx, err := a.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT setval('free_seq', $1)", 70000)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	c.waitConverged()

	for i := 0; i < 3; i++ {
		conn := c.connect(i)
		var id int64
		require.NoError(t, conn.QueryRow(ctx, "INSERT INTO loaded (v) VALUES ('y') RETURNING id").Scan(&id),
			"node %d: an insert after the load must not collide with the loaded ids", i+1)
		require.Greater(t, id, int64(5000), "node %d", i+1)
		require.EqualValues(t, i+1, id%100, "node %d keeps its residue class", i+1)
		var v int64
		require.NoError(t, conn.QueryRow(ctx, "SELECT nextval('free_seq')").Scan(&v))
		require.Greater(t, v, int64(70000), "node %d: free_seq continues above the setval", i+1)
		require.EqualValues(t, i+1, v%100, "node %d keeps its residue class", i+1)
	}

	// setval back down (a reset) is carried too.
	_, err = c.connect(1).Exec(ctx, "SELECT setval('free_seq', 10)")
	require.NoError(t, err)
	c.waitConverged()
	for i := 0; i < 3; i++ {
		var v int64
		require.NoError(t, c.connect(i).QueryRow(ctx, "SELECT nextval('free_seq')").Scan(&v))
		require.Less(t, v, int64(70000), "node %d: the reset reached it", i+1)
		require.EqualValues(t, i+1, v%100, "node %d keeps its residue class", i+1)
	}

	// A descending sequence (never normalized) is set exactly, and a
	// setval to bigint's end replays in bounds: a replay as "the next
	// value" left the first where it was on the other nodes and made the
	// second fail there (out of bounds).
	_, err = a.Exec(ctx, "CREATE SEQUENCE down_seq INCREMENT -1 MAXVALUE -1 START -1; CREATE SEQUENCE end_seq")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "SELECT setval('down_seq', -500)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "SELECT setval('end_seq', 9223372036854775807)")
	require.NoError(t, err)
	c.waitConverged()
	for i := 0; i < 3; i++ {
		var last int64
		var called bool
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT last_value, is_called FROM down_seq").Scan(&last, &called))
		require.Equal(t, []any{int64(-500), true}, []any{last, called}, "node %d: down_seq", i+1)
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT last_value, is_called FROM end_seq").Scan(&last, &called))
		require.Equal(t, []any{int64(math.MaxInt64), true}, []any{last, called}, "node %d: end_seq", i+1)
	}
	c.waitConverged()
	sum := c.checksum(0, "loaded")
	for i := range c.nodes {
		require.Equal(t, sum, c.checksum(i, "loaded"))
		require.Zero(t, c.unreplicated(i))
	}
}

// TestRestartIdentityKeepsResidueClasses: `TRUNCATE … RESTART IDENTITY`
// (what test suites and ORMs run between tests) restarts the table's
// sequences on every node, and every node must then still hand out values
// of its own residue class: two nodes restarted at the sequence's START
// would hand out the same ids.
func TestRestartIdentityKeepsResidueClasses(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE restarted (id serial PRIMARY KEY, n int NOT NULL, k bigint GENERATED ALWAYS AS IDENTITY UNIQUE)")
	require.NoError(t, err)
	c.waitConverged()
	for i := 0; i < 3; i++ {
		_, err := c.connect(i).Exec(ctx, "INSERT INTO restarted (n) VALUES ($1)", i+1)
		require.NoError(t, err)
	}
	// (Node 2's TRUNCATE conflicts with an insert it has not applied yet.)
	c.waitConverged()
	for _, restart := range []string{"TRUNCATE restarted RESTART IDENTITY", "BEGIN; TRUNCATE restarted RESTART IDENTITY; COMMIT"} {
		_, err = c.connect(1).Exec(ctx, restart)
		require.NoError(t, err, restart)
		c.waitConverged()
		for i := 0; i < 3; i++ {
			var id, k int64
			require.NoError(t, c.connect(i).QueryRow(ctx, "INSERT INTO restarted (n) VALUES ($1) RETURNING id, k", i+1).Scan(&id, &k),
				"%s: node %d's insert", restart, i+1)
			require.EqualValues(t, i+1, id%100, "%s: node %d's serial keeps its residue class (id %d)", restart, i+1, id)
			require.EqualValues(t, i+1, k%100, "%s: node %d's identity keeps its residue class (k %d)", restart, i+1, k)
		}
		c.waitConverged()
	}
	sum := c.checksum(0, "restarted")
	for i := range c.nodes {
		require.Equal(t, sum, c.checksum(i, "restarted"))
	}
}
