package e2e

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestStatementTimeoutIsTheClientsOwn: a client's statement_timeout fails
// its own statements with PostgreSQL's 57014, never Ordo's commit of them
// (PREPARE waits for a WAL flush), and a timeout that fires as a statement
// ends, and hits the next statement PostgreSQL runs (often one of Ordo's),
// is neither reported as a replication conflict (40001) nor leaves the
// session inside a failed transaction its client does not know of (every
// later statement 25P02). Every insert acknowledged is there, no other.
func TestStatementTimeoutIsTheClientsOwn(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE timed (id serial PRIMARY KEY, v int)")
	require.NoError(t, err)
	c.waitConverged()
	conn := c.connect(1)
	_, err = conn.Exec(ctx, "SET statement_timeout = 1")
	require.NoError(t, err)
	acknowledged, timedOut := 0, 0
	sizes := []int{20, 100, 400, 3000} // (3000 rows take more than 1 ms even on a quiet machine: CI once saw none time out)
	for i := 0; i < 300; i++ {
		n := sizes[i%len(sizes)]
		_, err := conn.Exec(ctx, "INSERT INTO timed (v) SELECT $1 FROM generate_series(1, $1)", n)
		if err == nil {
			acknowledged += n
			continue
		}
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "statement %d: %v", i, err)
		require.Equal(t, "57014", pe.Code, "statement %d: PostgreSQL's own query cancel, nothing else: %v", i, err)
		timedOut++
	}
	t.Logf("%d statements timed out, %d rows acknowledged", timedOut, acknowledged)
	require.Positive(t, timedOut, "no statement timed out: the test did not try what it is about")
	_, err = conn.Exec(ctx, "SET statement_timeout = 0")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO timed (v) VALUES (0)")
	require.NoError(t, err, "the session goes on as usual")
	c.waitConverged()
	for i := range c.nodes {
		var rows int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM timed").Scan(&rows))
		require.Equal(t, acknowledged+1, rows, "node %d: exactly the acknowledged rows", i+1)
		require.Zero(t, c.unreplicated(i))
	}
}
