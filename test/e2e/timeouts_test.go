package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNodeIgnoresSessionTimeouts: node 2's database gives every session
// default_transaction_read_only and SERIALIZABLE by default, and
// a statement_timeout of 300 ms and an idle_session_timeout of 1 s (and a
// transaction_timeout of 350 ms from PostgreSQL 17 on), as
// DBAs and managed services do. They are for clients: an apply that
// takes longer (a bulk insert) failed with 57014 on every attempt, and
// node 2 stopped; its idle connections were ended every second.
func TestNodeIgnoresSessionTimeouts(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE bulk (id int PRIMARY KEY, v text)")
	require.NoError(t, err)
	c.waitConverged()

	c.nodes[1].Stop()
	settings := []string{
		// Not less: a client's session starts with a query of Ordo's
		// (its pid, search path…), which a machine as loaded as CI's,
		// with the safety suite beside it, once kept past 100 ms.
		"ALTER DATABASE postgres SET statement_timeout = '300ms'",
		"ALTER DATABASE postgres SET idle_session_timeout = '1s'",
		"ALTER DATABASE postgres SET idle_in_transaction_session_timeout = '1s'",
		"ALTER DATABASE postgres SET default_transaction_isolation = 'serializable'",
	}
	var version int
	require.NoError(t, c.direct(1).QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version))
	if version >= 170000 {
		settings = append(settings, "ALTER DATABASE postgres SET transaction_timeout = '350ms'")
	}
	// last: what makes the database read-only for clients (this one too)
	settings = append(settings, "ALTER DATABASE postgres SET default_transaction_read_only = on")
	for _, sql := range settings {
		_, err := c.direct(1).Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.startNode(1)

	_, err = c.connect(0).Exec(ctx, "INSERT INTO bulk SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g")
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // the node's idle connections outlive idle_session_timeout
	_, err = c.connect(0).Exec(ctx, "UPDATE bulk SET v = 'y' WHERE id = 1")
	require.NoError(t, err)
	c.waitConverged()
	var n int
	d := c.direct(1) // a session of the database's too: its count may take longer than 300 ms
	_, err = d.Exec(ctx, "SET statement_timeout = 0")
	require.NoError(t, err)
	require.NoError(t, d.QueryRow(ctx, "SELECT count(*) FROM bulk WHERE v = 'y' OR id > 1").Scan(&n))
	require.Equal(t, 200000, n)

	// Clients of node 2 keep the database's settings.
	_, err = c.connect(1).Exec(ctx, "SELECT pg_sleep(1)")
	require.ErrorContains(t, err, "timeout")
}
