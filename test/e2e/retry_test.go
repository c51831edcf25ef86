package e2e

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// TestAutocommitConflictsAreRetried: autocommit increments of one row
// from two nodes at once, sent as simple queries. Node 1 never retries
// (autocommit_retries 0), node 2 retries: node 2's clients see no
// replication conflict where node 1's see many, and every increment a
// client was told of is in the row exactly once, none other.
func TestAutocommitConflictsAreRetried(t *testing.T) {
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

	// Two clients per node: the second of two updates on one node waits
	// for the first's row lock and fails in PostgreSQL (REPEATABLE READ);
	// a client on the other node is aborted by certification or by the
	// apply that needs its lock.
	const perClient = 75
	var mu sync.Mutex
	ok := map[int]int{}
	failed := map[int]map[string]int{1: {}, 2: {}}
	var wg sync.WaitGroup
	for _, node := range []int{1, 2, 1, 2} {
		conn := c.connect(node - 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				tag, err := conn.Exec(sctx, "UPDATE counter SET n = n + 1 WHERE id = 1", pgx.QueryExecModeSimpleProtocol)
				timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded)
				cancel()
				if timedOut {
					for i := 0; i < 3; i++ {
						rows, _ := c.direct(i).Query(ctx, "SELECT pid, state, backend_type, left(query, 60), wait_event_type, wait_event, backend_xid::text FROM pg_stat_activity WHERE datname = 'postgres'")
						vals, _ := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
							P                 int
							S, B, Q, WT, W, X *string
						}])
						for _, v := range vals {
							t.Logf("node %d: pid %d state %v type %v query %v wait %v %v xid %v", i+1, v.P, deref(v.S), deref(v.B), deref(v.Q), deref(v.WT), deref(v.W), deref(v.X))
						}
						rows, _ = c.direct(i).Query(ctx, "SELECT gid, transaction::text FROM pg_prepared_xacts")
						pv, _ := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ G, X string }])
						t.Logf("node %d prepared: %v", i+1, pv)
					}
				}
				mu.Lock()
				var pe *pgconn.PgError
				switch {
				case err == nil:
					if tag.String() != "UPDATE 1" {
						failed[node]["tag "+tag.String()]++
					} else {
						ok[node]++
					}
				case errors.As(err, &pe):
					msg, _, _ := strings.Cut(pe.Message, " (")
					failed[node][pe.Code+" "+msg]++
				default:
					failed[node][err.Error()]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.waitConverged()
	t.Logf("node 1 (no retries): %d committed, failures %v", ok[1], failed[1])
	t.Logf("node 2 (retries): %d committed, failures %v", ok[2], failed[2])
	var n int
	require.NoError(t, c.direct(2).QueryRow(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n))
	require.Equal(t, ok[1]+ok[2], n, "every increment a client was told of, exactly once")
	require.Positive(t, 2*perClient-ok[1], "node 1's clients saw conflicts (else the test shows nothing)")
	require.Empty(t, failed[2], "node 2 retried its conflicts")
	require.Equal(t, 2*perClient, ok[2])
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
