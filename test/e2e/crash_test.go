package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/pglocal"
)

// procCluster runs each node as a real `ordo start` process, so a node can
// be killed with SIGKILL.
type procCluster struct {
	t       *testing.T
	bin     string
	pg      *pglocal.Cluster
	dir     string
	listen  []string
	metrics []string
	procs   []*exec.Cmd
}

func buildOrdo(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "ordo")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/ordo").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// startProcCluster starts n `ordo start` processes; extra lines are added
// to every node's configuration file, with @ID@ replaced by the node's id.
func startProcCluster(t *testing.T, n int, protocol string, extra ...string) *procCluster {
	pg, err := pglocal.Start(context.Background(), pglocal.Options{N: n})
	require.NoError(t, err)
	c := &procCluster{t: t, bin: buildOrdo(t), pg: pg, dir: t.TempDir(), procs: make([]*exec.Cmd, n)}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
		pg.Stop()
		if t.Failed() {
			if keep := os.Getenv("ORDO_TEST_KEEP_LOGS"); keep != "" {
				_ = exec.Command("cp", "-r", c.dir, keep).Run()
			}
		}
	})
	peers := make([]string, n)
	for i := range peers {
		peers[i] = freeAddr(t)
		c.listen = append(c.listen, freeAddr(t))
		c.metrics = append(c.metrics, freeAddr(t))
	}
	for i := 0; i < n; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "id: %d\nlisten: %s\npeer_listen: %s\nmetrics_listen: %s\npostgres: %s\ndata_dir: %s\nprotocol: %s\npropose_timeout: 3s\ncommit_timeout: 20s\npeers:\n",
			i+1, c.listen[i], peers[i], c.metrics[i], pg.Servers[i].DSN("postgres"), filepath.Join(c.dir, fmt.Sprint("node", i+1)), protocol)
		for j, p := range peers {
			fmt.Fprintf(&b, "  %d: %s\n", j+1, p)
		}
		for _, line := range extra {
			b.WriteString(strings.ReplaceAll(line, "@ID@", fmt.Sprint(i+1)) + "\n")
		}
		require.NoError(t, os.WriteFile(c.config(i), []byte(b.String()), 0o600))
	}
	for i := 0; i < n; i++ {
		c.start(i)
	}
	return c
}

// settled reports whether no server holds a prepared transaction and query
// (one text value) answers the same on every server.
func (c *procCluster) settled(query string) bool {
	ctx := context.Background()
	answers := map[string]bool{}
	for _, s := range c.pg.Servers {
		d, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			return false
		}
		var answer string
		var prepared int
		err = d.QueryRow(ctx, query).Scan(&answer)
		if err == nil {
			err = d.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared)
		}
		d.Close(ctx)
		if err != nil || prepared > 0 {
			return false
		}
		answers[answer] = true
	}
	return len(answers) == 1
}

// state describes every node for a failure message: row counts, prepared
// transactions and the tail of the node's log.
func (c *procCluster) state() string {
	var b strings.Builder
	ctx := context.Background()
	for i := range c.pg.Servers {
		fmt.Fprintf(&b, "node %d:", i+1)
		if d, err := pgx.Connect(ctx, c.pg.Servers[i].DSN("postgres")); err == nil {
			var rows, prepared int
			var gids string
			_ = d.QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&rows)
			_ = d.QueryRow(ctx, "SELECT count(*), coalesce(string_agg(gid, ' '), '') FROM pg_prepared_xacts").Scan(&prepared, &gids)
			fmt.Fprintf(&b, " %d rows, %d prepared (%s)", rows, prepared, gids)
			d.Close(ctx)
		}
		log, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("node%d.log", i+1)))
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "\n  %s\n", strings.Join(lines, "\n  "))
	}
	return b.String()
}

func (c *procCluster) config(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("node%d.yaml", i+1))
}

func (c *procCluster) start(i int) {
	cmd := exec.Command(c.bin, "start", "--config", c.config(i), "--log-level", "info")
	logf, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("node%d.log", i+1)))
	require.NoError(c.t, err)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	require.NoError(c.t, err)
	require.NoError(c.t, cmd.Start())
	c.procs[i] = cmd
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving PostgreSQL clients") {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		log, _ := os.ReadFile(logf.Name())
		c.t.Fatalf("node %d did not start within 60s:\n%s", i+1, log)
	}
}

func (c *procCluster) kill(i int) {
	if p := c.procs[i]; p != nil && p.Process != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
		c.procs[i] = nil
	}
}

func (c *procCluster) dsn(i int) string {
	return fmt.Sprintf("postgres://ordo:ordo@%s/postgres?sslmode=disable&connect_timeout=5", c.listen[i])
}

// scrape returns the lines of node i's /metrics.
func (c *procCluster) scrape(i int) []string {
	resp, err := http.Get("http://" + c.metrics[i] + "/metrics")
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(c.t, sc.Err())
	return lines
}

// metric reads one counter from node i's /metrics.
func (c *procCluster) metric(i int, name string) float64 {
	for _, line := range c.scrape(i) {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			require.NoError(c.t, err)
			return v
		}
	}
	c.t.Fatalf("node %d exports no %s", i+1, name)
	return 0
}

// TestKillNodeMidCommitAndRestart kills a node with SIGKILL while clients
// commit through it; its clients get connection errors; after a restart it
// resolves its leftover prepared transactions and catches up, and every
// node ends with identical data: each transaction committed everywhere or
// nowhere.
func TestKillNodeMidCommitAndRestart(t *testing.T) {
	t.Parallel()
	// Under dbsm-rc every transaction reads _ordo.applied: a prepared one
	// left by the kill held its lock, and the restart waited for good on
	// its own bootstrap.
	for _, protocol := range []string{"dbsm-si", "pgr", "cons", "dbsm-rc"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel() // separate clusters; most of each is sleeps and restarts
			killNodeMidCommitAndRestart(t, protocol)
		})
	}
}

func killNodeMidCommitAndRestart(t *testing.T, protocol string) {
	c := startProcCluster(t, 3, protocol)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE ledger (id int PRIMARY KEY, node int, note text)")
	require.NoError(t, err)

	var next atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var connErrs atomic.Int64
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := w % 3
			for {
				select {
				case <-stop:
					return
				default:
				}
				cn, err := pgx.Connect(ctx, c.dsn(node))
				if err != nil {
					connErrs.Add(1)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				for i := 0; i < 20; i++ {
					id := next.Add(1)
					_, err := cn.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2, 'x')", id, node+1)
					if err != nil {
						if sqlstate(err) == "" || sqlstate(err) == "08007" || sqlstate(err) == "57P01" {
							connErrs.Add(1)
						}
						break
					}
				}
				cn.Close(ctx)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	c.kill(2) // SIGKILL, mid-commit for its clients
	time.Sleep(2 * time.Second)
	c.start(2)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	require.Positive(t, connErrs.Load(), "clients of the killed node must have seen connection errors")

	// Converged, identical, nothing left prepared, nothing unreplicated.
	require.Eventually(t, func() bool {
		return c.settled("SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM ledger t")
	}, 60*time.Second, 500*time.Millisecond, "nodes did not converge to identical data with no prepared transactions left:\n%s", c.state())
	for i := range c.procs {
		require.Zero(t, c.metric(i, "ordo_capture_unreplicated_commits_total"), "node %d", i+1)
	}
	var rows int
	d, err := pgx.Connect(ctx, c.pg.Servers[2].DSN("postgres"))
	require.NoError(t, err)
	defer d.Close(ctx)
	require.NoError(t, d.QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&rows))
	require.Positive(t, rows)
	t.Logf("%d rows, %d client connection errors", rows, connErrs.Load())
}

// TestMinorityCannotCommit: a node cut off from the majority answers update
// commits with a clear error within the propose timeout, never commits
// locally, and converges once the majority is back.
func TestMinorityCannotCommit(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm", "pgr", "cons"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel() // separate clusters; most of each is waiting for timeouts
			minorityCannotCommit(t, protocol)
		})
	}
}

func minorityCannotCommit(t *testing.T, protocol string) {
	c := startProcCluster(t, 3, protocol)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE m (id int PRIMARY KEY)")
	require.NoError(t, err)

	c.kill(1)
	c.kill(2)
	began := time.Now()
	_, err = conn.Exec(ctx, "INSERT INTO m VALUES (1)")
	took := time.Since(began)
	require.Error(t, err, "a minority node must not commit")
	if protocol == "cons" {
		// Refused before anything ran: its classes cannot be ordered.
		require.Equal(t, "55P03", sqlstate(err), "clear error: %v", err)
		require.Contains(t, err.Error(), "cannot reach a majority of the cluster")
	} else {
		require.Equal(t, "08007", sqlstate(err), "clear error: %v", err)
	}
	require.Less(t, took, 30*time.Second, "must fail, not hang")
	t.Logf("minority commit failed after %s: %v", took.Round(time.Millisecond), err)
	// Reads still work on the minority node.
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM m").Scan(&n))
	require.Zero(t, n, "nothing committed locally")

	c.start(1)
	c.start(2)
	// The transaction is decided one way everywhere once the majority is
	// back (its entry or its abort, whichever is delivered first).
	require.Eventually(t, func() bool {
		return c.settled("SELECT count(*)::text FROM m")
	}, 60*time.Second, 500*time.Millisecond)
	_, err = conn.Exec(ctx, "INSERT INTO m VALUES (2)")
	require.NoError(t, err, "after healing, the node commits again")
}
