package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// exited reports whether node i's process has exited (a zombie until
// reaped by kill).
func (c *procCluster) exited(i int) bool {
	p := c.procs[i]
	if p == nil || p.Process == nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// TestBackendCrashLosesNothing kills one PostgreSQL backend of a node
// with SIGKILL while the node applies a stream of writes from the others.
// PostgreSQL then reinitializes (every connection dies, the WAL it had not
// written is gone, pg_postmaster_start_time() does not change). The node
// must not carry on believing it applied what PostgreSQL lost: it either
// finds everything it acknowledged still there and goes on, or stops and
// replays once restarted (as a supervisor would). In the end every node
// has the same rows.
func TestBackendCrashLosesNothing(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE ledger (id int PRIMARY KEY, node int, note text)")
	require.NoError(t, err)

	var next atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := []int{0, 2}[w%2] // node 2 only applies
			for {
				select {
				case <-stop:
					return
				default:
				}
				cn, err := pgx.Connect(ctx, c.dsn(node))
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				for i := 0; i < 50; i++ {
					if _, err := cn.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2, 'x')", next.Add(1), node+1); err != nil {
						break
					}
				}
				cn.Close(ctx)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	d, err := pgx.Connect(ctx, c.pg.Servers[1].DSN("postgres"))
	require.NoError(t, err)
	var pid int
	require.NoError(t, d.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'
		AND pid <> pg_backend_pid() AND datname = current_database() ORDER BY backend_start LIMIT 1`).Scan(&pid))
	d.Close(ctx)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	t.Logf("killed backend %d of node 2's PostgreSQL", pid)
	restarts := 0
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if c.exited(1) {
			c.kill(1) // reap
			c.start(1)
			restarts++
		}
	}
	close(stop)
	wg.Wait()
	if c.exited(1) {
		c.kill(1)
		c.start(1)
		restarts++
	}
	if !assertEventually(func() bool {
		return c.settled("SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM ledger t")
	}, 60*time.Second) {
		t.Fatalf("nodes did not converge to identical data with no prepared transactions left:\n%s", c.state())
	}
	t.Logf("%d rows written; node 2 restarted %d times", next.Load(), restarts)
}
