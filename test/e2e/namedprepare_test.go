package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNamedPrepareKeepsOrdosBeginOutOfTheClientsUnit: the BEGIN Ordo
// wraps an update in goes ahead of a named statement's Parse in a round
// trip of its own, not in the client's unit. In the client's unit it
// counted toward the client's statement_timeout, and a timeout just after
// the Parse left the statement in PostgreSQL while pgx heard that its
// prepare had failed: every later Parse of that name failed with 42P05
// (TestStatementTimeoutIsTheClientsOwn, once in CI on PostgreSQL 18).
// PostgreSQL's statement log shows where the BEGIN went: `execute
// ordo_begin` is the one sent in the client's unit.
func TestNamedPrepareKeepsOrdosBeginOutOfTheClientsUnit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, "CREATE TABLE np (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET log_statement = 'all'")
	require.NoError(t, err)
	logFile := c.pg.Servers[0].LogFile
	logged := func() int64 {
		fi, err := os.Stat(logFile)
		require.NoError(t, err)
		return fi.Size()
	}
	from := logged()
	_, err = conn.Prepare(ctx, "np_insert", "INSERT INTO np VALUES ($1)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT 'np prepared'") // a marker in the log
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(logFile)
		require.NoError(t, err)
		return strings.Contains(string(b[from:]), "np prepared")
	}, 10*time.Second, 50*time.Millisecond)
	b, err := os.ReadFile(logFile)
	require.NoError(t, err)
	prepared := string(b[from:])
	prepared = prepared[:strings.Index(prepared, "np prepared")]
	require.Contains(t, prepared, "BEGIN ISOLATION LEVEL REPEATABLE READ", "the prepare is wrapped")
	require.NotContains(t, prepared, "execute ordo_begin", "Ordo's BEGIN in the client's unit")
	// The statement runs as usual (its BEGIN may travel with its Bind:
	// a timeout there leaves no statement behind).
	_, err = conn.Exec(ctx, "np_insert", 1)
	require.NoError(t, err)
	c.waitConverged()
	var n int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT count(*) FROM np").Scan(&n))
	require.Equal(t, 1, n)
}
