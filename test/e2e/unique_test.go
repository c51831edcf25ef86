package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// commitConcurrently runs sqlA on a and sqlB on b, each in its own
// transaction, commits both at once, and returns how many committed; a
// loser must have got 40001. It waits for the cluster to converge.
func (c *cluster) commitConcurrently(what string, a, b *pgx.Conn, sqlA, sqlB string) int {
	t := c.t
	t.Helper()
	ctx := context.Background()
	ta, err := a.Begin(ctx)
	require.NoError(t, err)
	tb, err := b.Begin(ctx)
	require.NoError(t, err)
	_, err = ta.Exec(ctx, sqlA)
	require.NoError(t, err, what)
	_, err = tb.Exec(ctx, sqlB)
	require.NoError(t, err, what)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, tx := range []pgx.Tx{ta, tb} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tx.Commit(ctx) }()
	}
	wg.Wait()
	committed := 0
	for _, err := range errs {
		if err == nil {
			committed++
		} else {
			require.Equal(t, "40001", sqlstate(err), "%s: the loser must get 40001, got %v", what, err)
		}
	}
	c.waitConverged()
	return committed
}

// TestConcurrentDuplicateUniqueValuesOneWins: two nodes each insert a row
// with the same value of a unique column at the same time. The rows have
// different primary keys, so only the unique index's key (certified like a
// row key) tells they collide: exactly one commits, the other gets 40001,
// and no node finds a duplicate when it applies the winner. NULLs in a
// unique column never collide (unless NULLS NOT DISTINCT), and an UPDATE
// that claims a value collides with an INSERT of it.
func TestConcurrentDuplicateUniqueValuesOneWins(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a, b := c.connect(0), c.connect(1)
	_, err := a.Exec(ctx, `CREATE TABLE users (
		id bigserial PRIMARY KEY,
		email text NOT NULL UNIQUE,
		nick text UNIQUE,
		tenant int NOT NULL DEFAULT 0,
		code text,
		UNIQUE NULLS NOT DISTINCT (tenant, code))`)
	require.NoError(t, err)
	c.waitConverged()

	race := func(round, sqlA, sqlB string) int { return c.commitConcurrently(round, a, b, sqlA, sqlB) }

	for r := 0; r < 4; r++ {
		email := fmt.Sprintf("u%d@example.com", r)
		n := race(fmt.Sprintf("round %d, same email", r),
			fmt.Sprintf("INSERT INTO users (email, tenant, code) VALUES ('%s', 1, 'a%d')", email, r),
			fmt.Sprintf("INSERT INTO users (email, tenant, code) VALUES ('%s', 2, 'b%d')", email, r))
		require.Equal(t, 1, n, "round %d: exactly one of two inserts of the same email commits", r)
	}
	// NULLs in a plain unique column are distinct: both commit.
	n := race("null nick",
		"INSERT INTO users (email, tenant, code) VALUES ('n1@example.com', 3, 'x')",
		"INSERT INTO users (email, tenant, code) VALUES ('n2@example.com', 4, 'x')")
	require.Equal(t, 2, n, "rows with NULL in a unique column do not collide")
	// NULLS NOT DISTINCT: (5, NULL) twice collides.
	n = race("nulls not distinct",
		"INSERT INTO users (email, tenant) VALUES ('d1@example.com', 5)",
		"INSERT INTO users (email, tenant) VALUES ('d2@example.com', 5)")
	require.Equal(t, 1, n, "NULLS NOT DISTINCT values collide")
	// An UPDATE claiming a value against an INSERT of it.
	_, err = a.Exec(ctx, "INSERT INTO users (email, tenant, code) VALUES ('old@example.com', 6, 'o')")
	require.NoError(t, err)
	c.waitConverged()
	n = race("update vs insert",
		"UPDATE users SET email = 'new@example.com' WHERE email = 'old@example.com'",
		"INSERT INTO users (email, tenant, code) VALUES ('new@example.com', 7, 'p')")
	require.Equal(t, 1, n, "an update and an insert claiming one email: one commits")
	// An expression/partial unique index is opaque to the capture: writers
	// of the table conflict conservatively, and never diverge. (The index
	// is created now: the capture must learn of it.)
	_, err = b.Exec(ctx, "CREATE UNIQUE INDEX users_lower_nick ON users (lower(nick)) WHERE nick <> ''")
	require.NoError(t, err)
	c.waitConverged()
	n = race("expression index",
		"INSERT INTO users (email, nick, tenant, code) VALUES ('e1@example.com', 'Zed', 8, 'q')",
		"INSERT INTO users (email, nick, tenant, code) VALUES ('e2@example.com', 'zed', 9, 'r')")
	require.Equal(t, 1, n, "nicks equal under lower() collide")

	// Every node still accepts writes and holds the same rows.
	for i := range c.nodes {
		_, err := c.connect(i).Exec(ctx, "INSERT INTO users (email, tenant, code) VALUES ($1, 10, $1)", fmt.Sprintf("after%d@example.com", i))
		require.NoError(t, err, "node %d must still accept writes", i+1)
	}
	c.waitConverged()
	sum := c.checksum(0, "users")
	for i := range c.nodes {
		require.Equal(t, sum, c.checksum(i, "users"), "node %d differs", i+1)
		require.Zero(t, c.unreplicated(i))
	}
}

// TestConcurrentParentDeleteAndChildInsert: node A deletes a parent row
// while node B inserts a child referencing it. Each is valid on its own
// node; together they would leave an orphan on every node (an apply runs
// with foreign-key triggers off). The child's reference (R on the parent's
// row key) conflicts with the delete (X): exactly one commits. Two
// children of one parent inserted on two nodes do not conflict.
func TestConcurrentParentDeleteAndChildInsert(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a, b := c.connect(0), c.connect(1)
	_, err := a.Exec(ctx, `CREATE TABLE parent (tenant int, id int, PRIMARY KEY (tenant, id));
		CREATE TABLE child (id int PRIMARY KEY, p_id int, p_tenant int,
			FOREIGN KEY (p_id, p_tenant) REFERENCES parent (id, tenant) ON DELETE CASCADE)`)
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO parent SELECT 1, g FROM generate_series(1, 10) g")
	require.NoError(t, err)
	c.waitConverged()

	commitBoth := func(sqlA, sqlB string) int { return c.commitConcurrently(sqlA+" / "+sqlB, a, b, sqlA, sqlB) }
	for r := 1; r <= 4; r++ {
		n := commitBoth(fmt.Sprintf("DELETE FROM parent WHERE tenant = 1 AND id = %d", r),
			fmt.Sprintf("INSERT INTO child VALUES (%d, %d, 1)", r, r))
		require.Equal(t, 1, n, "round %d: a parent delete and a child insert referencing it: one commits", r)
	}
	n := commitBoth("INSERT INTO child VALUES (100, 9, 1)", "INSERT INTO child VALUES (101, 9, 1)")
	require.Equal(t, 2, n, "two children of one parent do not conflict")

	for i := range c.nodes {
		var orphans int
		require.NoError(t, c.direct(i).QueryRow(ctx, `SELECT count(*) FROM child c
			LEFT JOIN parent p ON p.tenant = c.p_tenant AND p.id = c.p_id WHERE p.id IS NULL`).Scan(&orphans))
		require.Zero(t, orphans, "node %d has children without a parent", i+1)
	}
	for _, tbl := range []string{"parent", "child"} {
		sum := c.checksum(0, tbl)
		for i := range c.nodes {
			require.Equal(t, sum, c.checksum(i, tbl), "%s differs on node %d", tbl, i+1)
		}
	}
}

// TestTooLargeTransactionIsRefusedWhole: a transaction beyond the
// configured write-set limits is rolled back on its node with SQLSTATE
// 54000 and a message naming the limit; nothing reaches any node, and the
// cluster goes on. One within the limits commits.
func TestTooLargeTransactionIsRefusedWhole(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm-si", func(n *config.Node) {
		n.MaxWriteSetRows = 1000
		n.MaxWriteSetBytes = 1 << 20
	})
	ctx := context.Background()
	a := c.connect(0)
	_, err := a.Exec(ctx, "CREATE TABLE big (id int PRIMARY KEY, pad text)")
	require.NoError(t, err)

	_, err = a.Exec(ctx, "INSERT INTO big SELECT g, 'x' FROM generate_series(1, 2000) g")
	require.Equal(t, "54000", sqlstate(err), "too many rows: %v", err)
	require.ErrorContains(t, err, "max_write_set_rows")
	_, err = a.Exec(ctx, "INSERT INTO big SELECT g, repeat('x', 4000) FROM generate_series(1, 500) g")
	require.Equal(t, "54000", sqlstate(err), "too many bytes: %v", err)

	_, err = a.Exec(ctx, "INSERT INTO big SELECT g, 'x' FROM generate_series(1, 900) g")
	require.NoError(t, err)
	c.waitConverged()
	for i := range c.nodes {
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM big").Scan(&n))
		require.Equal(t, 900, n, "node %d", i+1)
		require.Zero(t, c.unreplicated(i))
	}
}
