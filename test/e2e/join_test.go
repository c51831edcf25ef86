package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/join"
	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/pkg/config"
)

// addPostgres starts one more PostgreSQL server (empty) and a
// configuration for a node in front of it with id len(c.cfgs)+1, whose
// peers: are the bootstrap members and itself. It returns the node's
// index.
func (c *cluster) addPostgres() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pglocal.Start(ctx, pglocal.Options{N: 1})
	require.NoError(c.t, err)
	c.more = append(c.more, pg)
	c.pg.Servers = append(c.pg.Servers, pg.Servers[0]) // c.direct(i)
	i := len(c.cfgs)
	peers := map[uint32]string{}
	for id, a := range c.cfgs[0].Peers {
		peers[id] = a
	}
	peers[uint32(i+1)] = freeAddr(c.t)
	cfg := &config.Node{
		ID: uint32(i + 1), Listen: freeAddr(c.t), PeerListen: peers[uint32(i+1)],
		Postgres: pg.Servers[0].DSN("postgres"), DataDir: filepath.Join(c.dir, fmt.Sprintf("node%d", i+1)),
		Peers: peers, Protocol: c.cfgs[0].Protocol, CommitTimeout: c.cfgs[0].CommitTimeout, ProposeTimeout: c.cfgs[0].ProposeTimeout,
		// Cluster-wide settings.
		CertificationWindow: c.cfgs[0].CertificationWindow, LogRetentionEntries: c.cfgs[0].LogRetentionEntries,
	}
	cfg.Defaults()
	require.NoError(c.t, cfg.Validate())
	c.cfgs = append(c.cfgs, cfg)
	c.nodes = append(c.nodes, nil)
	return i
}

// adminClient is a client of node i's admin API with its token.
func (c *cluster) adminClient(i int) *admin.Client {
	tok, err := readFile(filepath.Join(c.cfgs[i].DataDir, admin.TokenFileName))
	require.NoError(c.t, err)
	cl := admin.NewClient(c.nodes[i].AdminAddr(), admin.ClientOptions{Token: strings.TrimSpace(tok)})
	c.t.Cleanup(cl.Close)
	return cl
}

// startJoin starts node i (added by addPostgres) with a state transfer
// from donor, bounded by ctx.
func (c *cluster) startJoin(ctx context.Context, i, donor int, progress io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	nd, err := node.StartJoin(ctx, c.cfgs[i], c.logger(i), node.JoinOptions{
		From: c.adminClient(donor), BinDir: c.pg.BinDir, Progress: progress,
	})
	if err != nil {
		return err
	}
	c.nodes[i] = nd
	return nil
}

// rejoin stops node i and brings it back under its own id by a state
// transfer from donor ('ordo join --rejoin').
func (c *cluster) rejoin(i, donor int) {
	c.nodes[i].Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	nd, err := node.StartJoin(ctx, c.cfgs[i], c.logger(i), node.JoinOptions{
		From: c.adminClient(donor), BinDir: c.pg.BinDir, Progress: &out, Rejoin: true,
	})
	require.NoError(c.t, err, "rejoin node %d:\n%s", i+1, out.String())
	c.nodes[i] = nd
	c.t.Logf("rejoin of node %d:\n%s", i+1, out.String())
}

// role returns node i's role in the group as node on sees it ("" if not a
// member).
func (c *cluster) role(on, i int) string {
	ms, err := c.adminClient(on).Members(context.Background())
	require.NoError(c.t, err)
	for _, m := range ms.Members {
		if m.ID == uint64(c.cfgs[i].ID) {
			return m.Role
		}
	}
	return ""
}

// bank is a bank workload: transfers between accounts, each with a ledger
// row, through the given nodes; it remembers every acknowledged ledger
// row.
type bank struct {
	c         *cluster
	accounts  int
	mu        sync.Mutex
	acked     []string // "client/n" of acknowledged transfers
	commits   atomic.Int64
	aborts    atomic.Int64
	failed    atomic.Int64 // clients through mayFail that ended
	failedErr errorSlot    // and the last error one of them saw
	errs      errorSlot
	stop      chan struct{}
	wg        sync.WaitGroup
}

func newBank(c *cluster, accounts int) *bank {
	ctx := context.Background()
	setup := c.connect(0)
	for _, q := range []string{
		"CREATE TABLE bank (id int PRIMARY KEY, bal bigint NOT NULL)",
		fmt.Sprintf("INSERT INTO bank SELECT g, 1000 FROM generate_series(1, %d) g", accounts),
		"CREATE TABLE ledger (id bigserial PRIMARY KEY, client int NOT NULL, n int NOT NULL, src int NOT NULL, dst int NOT NULL, amount int NOT NULL, UNIQUE (client, n))",
	} {
		_, err := setup.Exec(ctx, q)
		require.NoError(c.t, err, q)
	}
	return &bank{c: c, accounts: accounts, stop: make(chan struct{})}
}

// run starts one client per entry of nodes. Clients through node mayFail
// (-1: none) end quietly on an error other than an abort (the node is
// being removed); the others fail the test at halt.
func (b *bank) run(nodes []int, mayFail int) {
	for w, i := range nodes {
		conn := b.c.connect(i)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(w), 18))
			for n := 0; ; n++ {
				select {
				case <-b.stop:
					return
				default:
				}
				from, to := 1+rng.IntN(b.accounts), 1+rng.IntN(b.accounts)
				if from == to {
					continue
				}
				amt := 1 + rng.IntN(50)
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE bank SET bal = bal - $1 WHERE id = $2", amt, from); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "UPDATE bank SET bal = bal + $1 WHERE id = $2", amt, to); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "INSERT INTO ledger (client, n, src, dst, amount) VALUES ($1, $2, $3, $4, $5)", w, n, from, to, amt)
					return err
				})
				switch {
				case err == nil:
					b.commits.Add(1)
					b.mu.Lock()
					b.acked = append(b.acked, fmt.Sprintf("%d/%d", w, n))
					b.mu.Unlock()
				case sqlstate(err) == "40001" || sqlstate(err) == "40P01":
					b.aborts.Add(1)
				case i == mayFail:
					b.failed.Add(1)
					b.failedErr.Store(err)
					return
				default:
					b.errs.Store(fmt.Errorf("client %d via node %d: transfer %d->%d: %w", w, i+1, from, to, err))
					return
				}
			}
		}()
	}
}

// halt stops the clients and fails the test on any unexpected error.
func (b *bank) halt() {
	close(b.stop)
	b.wg.Wait()
	if e := b.errs.Load(); e != nil {
		b.c.t.Fatalf("bank client: %v", e)
	}
}

// check verifies on node i's PostgreSQL that the total holds and that every
// acknowledged transfer is in the ledger.
func (b *bank) check(i int) {
	ctx := context.Background()
	conn := b.c.direct(i)
	var total int64
	require.NoError(b.c.t, conn.QueryRow(ctx, "SELECT sum(bal) FROM bank").Scan(&total))
	require.Equal(b.c.t, int64(1000*b.accounts), total, "node %d: the bank total", i+1)
	rows, err := conn.Query(ctx, "SELECT client || '/' || n FROM ledger")
	require.NoError(b.c.t, err)
	have := map[string]bool{}
	for rows.Next() {
		var k string
		require.NoError(b.c.t, rows.Scan(&k))
		have[k] = true
	}
	require.NoError(b.c.t, rows.Err())
	b.mu.Lock()
	defer b.mu.Unlock()
	var missing []string
	for _, k := range b.acked {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	require.Empty(b.c.t, missing, "node %d lacks acknowledged transfers", i+1)
}

// replicatedTables lists node i's replicated tables (what checksums cover).
func (c *cluster) replicatedTables(i int) []string {
	rows, err := c.direct(i).Query(context.Background(), `SELECT format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence = 'p'
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema', '_ordo') AND n.nspname NOT LIKE 'pg\_%'
		ORDER BY 1`)
	require.NoError(c.t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(c.t, err)
	return tables
}

// requireIdentical checks that every node has the same replicated tables
// with the same rows.
func (c *cluster) requireIdentical() {
	tables := c.replicatedTables(0)
	for i := range c.nodes {
		require.Equal(c.t, tables, c.replicatedTables(i), "node %d has other tables", i+1)
		for _, tb := range tables {
			require.Equal(c.t, c.checksum(0, tb), c.checksum(i, tb), "node %d: table %s differs from node 1", i+1, tb)
		}
	}
}

// A fourth node joins a running 3-node cluster by state transfer while
// clients run bank transfers through the three: it becomes a learner,
// copies node 2's database at an applied prefix, replays the order after
// it, and promotes itself to voter. Afterwards all four databases are
// identical, the total holds, no acknowledged transfer is missing, and
// the new node serves reads and writes (its sequence values in its own
// residue class).
func TestJoinUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	b := newBank(c, 20)
	setup := c.connect(0)
	for _, q := range []string{
		"CREATE ROLE join_app LOGIN PASSWORD 'app'",
		"CREATE TABLE filler (id int PRIMARY KEY, note text NOT NULL, at timestamptz NOT NULL DEFAULT now())",
		"INSERT INTO filler SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g",
		"CREATE INDEX filler_note ON filler (note)",
		"GRANT SELECT ON filler TO join_app",
		// Large objects live in system catalogs: the copy carries them.
		"SELECT lo_from_bytea(9001, convert_to(repeat('document ', 1000), 'UTF8'))",
		"BEGIN; SELECT lo_create(9002); GRANT SELECT ON LARGE OBJECT 9002 TO join_app; COMMENT ON LARGE OBJECT 9002 IS 'empty'; COMMIT",
	} {
		_, err := setup.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	var db string
	require.NoError(t, setup.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	for _, q := range []string{
		"ALTER DATABASE " + db + " SET work_mem = '7MB'",
		"ALTER ROLE join_app IN DATABASE " + db + " SET search_path = \"$user\", public, pg_temp",
	} {
		_, err := setup.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	settings := func(i int) string {
		var s string
		require.NoError(t, c.direct(i).QueryRow(ctx, `SELECT string_agg(coalesce(r.rolname, '*') || ':' || array_to_string(s.setconfig, ';'), ' ' ORDER BY r.rolname NULLS FIRST)
			FROM pg_db_role_setting s LEFT JOIN pg_roles r ON r.oid = s.setrole
			WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&s))
		return s
	}
	c.waitConverged()
	b.run([]int{0, 1, 2, 0, 1, 2}, -1)
	time.Sleep(2 * time.Second)

	j := c.addPostgres()

	// A database with something in it is never overwritten.
	_, err := c.direct(j).Exec(ctx, "CREATE TABLE mine (x int)")
	require.NoError(t, err)
	require.ErrorIs(t, c.startJoin(ctx, j, 1, nil), join.ErrNotEmpty)
	_, err = c.direct(j).Exec(ctx, "DROP TABLE mine")
	require.NoError(t, err)

	var progress bytes.Buffer
	began := time.Now()
	require.NoError(t, c.startJoin(ctx, j, 1, &progress))
	t.Logf("joined (transfer and start) in %s:\n%s", time.Since(began).Round(time.Millisecond), progress.String())
	require.Contains(t, progress.String(), "done: seqno")
	require.Positive(t, c.counter(j, "ordo_join_rows_copied_total", nil))
	require.Equal(t, 1.0, c.counter(j, "ordo_join_phase", map[string]string{"phase": "done"}))

	// It catches up under load and promotes itself.
	require.Eventually(t, func() bool { return c.role(0, j) == "voter" }, 60*time.Second, 200*time.Millisecond,
		"node %d did not become a voter", j+1)
	// Node 4 applies its own promotion when the entry reaches it, which
	// may be after node 1 did (a loaded machine: one e2e run in three).
	roles := map[uint64]string{}
	require.Eventually(t, func() bool {
		st, err := c.adminClient(j).Status(ctx)
		require.NoError(t, err)
		clear(roles)
		for _, m := range st.Members {
			roles[m.ID] = m.Role
		}
		return roles[4] == "voter"
	}, 30*time.Second, 200*time.Millisecond, "node 4's status")
	require.Equal(t, map[uint64]string{1: "voter", 2: "voter", 3: "voter", 4: "voter"}, roles, "members in node 4's status")
	time.Sleep(2 * time.Second)
	b.halt()
	t.Logf("bank: %d commits, %d aborts", b.commits.Load(), b.aborts.Load())
	require.Positive(t, b.commits.Load())

	c.waitConverged()
	c.requireIdentical()
	for i := range c.nodes {
		b.check(i)
		require.Zero(t, c.unreplicated(i), "node %d", i+1)
	}
	var prepared int
	require.NoError(t, c.direct(j).QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared))
	require.Zero(t, prepared)
	var canLogin bool
	require.NoError(t, c.direct(j).QueryRow(ctx, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'join_app'").Scan(&canLogin))
	require.True(t, canLogin, "the role was copied")
	require.Equal(t, `*:work_mem=7MB join_app:search_path="$user", public, pg_temp`, settings(j), "the database's settings were copied")
	require.Equal(t, settings(0), settings(j))
	for _, oid := range []uint32{9001, 9002} {
		require.Equal(t, loState(t, c.direct(0), oid), loState(t, c.direct(j), oid), "large object %d", oid)
		require.NotEqual(t, "none", loState(t, c.direct(j), oid))
	}
	require.Contains(t, progress.String(), "large objects: 2")

	// The new node serves reads and writes; its ledger ids are in its own
	// residue class, so they never collide with the others'.
	nc := c.connect(j)
	var n int
	require.NoError(t, nc.QueryRow(ctx, "SELECT count(*) FROM filler").Scan(&n))
	require.Equal(t, 20000, n)
	for k := 0; k < 5; k++ {
		_, err := nc.Exec(ctx, "INSERT INTO ledger (client, n, src, dst, amount) VALUES (99, $1, 1, 2, 0)", k)
		require.NoError(t, err)
	}
	_, err = c.connect(0).Exec(ctx, "INSERT INTO ledger (client, n, src, dst, amount) VALUES (98, 0, 1, 2, 0)")
	require.NoError(t, err)
	_, err = nc.Exec(ctx, "UPDATE bank SET bal = bal - 5 WHERE id = 1; UPDATE bank SET bal = bal + 5 WHERE id = 2")
	require.NoError(t, err)
	c.waitConverged()
	c.requireIdentical()
	b.check(0)
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// A node is removed from a 3-node cluster while clients run transfers
// through all three: the other two keep committing; the removed node ends
// its sessions and refuses new clients with an error that says it was
// removed, and its data directory never starts again.
func TestRemoveNodeUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	octl := buildOrdoctl(t)
	b := newBank(c, 20)
	c.waitConverged()
	b.run([]int{0, 1, 2, 0, 1, 2}, 2)
	time.Sleep(2 * time.Second)

	token := filepath.Join(c.cfgs[0].DataDir, admin.TokenFileName)
	out, errOut, code := octl.run("member", "remove", "3", "--endpoints", c.nodes[0].AdminAddr(), "--token-file", token, "-o", "json")
	require.Zero(t, code, "ordoctl member remove: %s%s", out, errOut)
	var ms struct {
		Members []admin.MemberRow `json:"members"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ms), out)
	require.Len(t, ms.Members, 2, out)
	for _, m := range ms.Members {
		require.NotEqual(t, uint64(3), m.ID)
		require.Equal(t, "voter", m.Role)
	}
	removedAt := b.commits.Load()
	// Its sessions end (none waits for good on a lock nothing there will
	// release).
	require.Eventually(t, func() bool { return b.failed.Load() == 2 }, 20*time.Second, 100*time.Millisecond,
		"the clients through node 3 did not all end")

	// The removed node refuses new clients, saying why.
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, c.dsn(2))
		if err == nil {
			conn.Close(ctx)
			return false
		}
		return sqlstate(err) == "57P03" && strings.Contains(err.Error(), "removed from the cluster")
	}, 15*time.Second, 200*time.Millisecond, "node 3 still accepts clients")

	// The other two keep committing.
	time.Sleep(3 * time.Second)
	b.halt()
	t.Logf("bank: %d commits (%d after the removal), %d aborts; %d clients through node 3 ended (%v)", b.commits.Load(), b.commits.Load()-removedAt, b.aborts.Load(), b.failed.Load(), b.failedErr.Load())
	require.Greater(t, b.commits.Load()-removedAt, int64(20), "commits after the removal")
	require.NoError(t, c.nodes[0].Replica().SyncRead(ctx))
	require.NoError(t, c.nodes[1].Replica().SyncRead(ctx))
	for _, tb := range c.replicatedTables(0) {
		require.Equal(t, c.checksum(0, tb), c.checksum(1, tb), "table %s", tb)
	}
	b.check(0)
	b.check(1)
	out, errOut, code = octl.run("member", "list", "--endpoints", c.nodes[1].AdminAddr(), "--token-file", filepath.Join(c.cfgs[1].DataDir, admin.TokenFileName), "-o", "json")
	require.Zero(t, code, "%s%s", out, errOut)
	ms.Members = nil
	require.NoError(t, json.Unmarshal([]byte(out), &ms), out)
	require.Len(t, ms.Members, 2, out)
	for _, m := range ms.Members {
		require.NotEqual(t, uint64(3), m.ID, out)
		require.Equal(t, "live", m.State, out)
	}

	// Its identity never comes back: the node does not start again.
	c.nodes[2].Stop()
	c.nodes[2] = nil
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nd, err := node.Start(sctx, c.cfgs[2], c.logger(2))
	if err == nil {
		nd.Stop()
	}
	require.ErrorContains(t, err, "removed from the cluster")
}

// `ordo join` (the command) is killed with SIGKILL while it copies, and
// run again: it recreates the half-copied database, completes the copy,
// and the node catches up and becomes a voter; stopped and run again, it
// copies nothing and catches up; it ends identical, while clients run
// transfers through the original three.
func TestJoinKilledAndRestarted(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	b := newBank(c, 20)
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE filler (id int PRIMARY KEY, note text NOT NULL); INSERT INTO filler SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g")
	require.NoError(t, err)
	c.waitConverged()
	b.run([]int{0, 1, 2}, -1)

	bin := filepath.Join(t.TempDir(), "ordo")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/ordo").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	j := c.addPostgres()
	cfg := c.cfgs[j]
	var y strings.Builder
	fmt.Fprintf(&y, "id: %d\nlisten: %s\npeer_listen: %s\npostgres: %s\ndata_dir: %s\nprotocol: %s\ncommit_timeout: 20s\npropose_timeout: 3s\npeers:\n",
		cfg.ID, cfg.Listen, cfg.PeerListen, cfg.Postgres, cfg.DataDir, cfg.Protocol)
	for id, a := range cfg.Peers {
		fmt.Fprintf(&y, "  %d: %s\n", id, a)
	}
	yml := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(yml, []byte(y.String()), 0o600))
	tok := filepath.Join(c.cfgs[1].DataDir, admin.TokenFileName)

	// run starts `ordo join` and returns it with its stdout lines.
	run := func() (*exec.Cmd, <-chan string) {
		cmd := exec.Command(bin, "join", "--config", yml, "--from", c.nodes[1].AdminAddr(), "--token-file", tok, "--pg-bin", c.pg.BinDir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		lines := make(chan string, 1000)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		return cmd, lines
	}
	// await reads lines until one holds substr and returns what it read.
	await := func(lines <-chan string, substr string) string {
		var seen strings.Builder
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("ordo join ended before %q:\n%s", substr, seen.String())
				}
				seen.WriteString(l + "\n")
				if strings.Contains(l, substr) {
					return seen.String()
				}
			case <-timeout:
				t.Fatalf("no %q from ordo join within 2m:\n%s", substr, seen.String())
			}
		}
	}

	first, lines := run()
	await(lines, "schema: ")
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()
	var partial int
	require.NoError(t, c.direct(j).QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = '_ordo'").Scan(&partial))
	require.Positive(t, partial, "the killed join had begun to copy")

	second, lines := run()
	seen := await(lines, "serving PostgreSQL clients")
	t.Logf("second run of ordo join:\n%s", seen)
	require.Contains(t, seen, "unfinished copy: recreating it empty")
	require.Contains(t, seen, "done: seqno")
	require.Eventually(t, func() bool { return c.role(0, j) == "voter" }, 60*time.Second, 200*time.Millisecond,
		"node %d did not become a voter", j+1)

	// Stopped and run again, the joined node copies nothing and catches up.
	require.NoError(t, second.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.Wait())
	third, lines := run()
	t.Cleanup(func() {
		_ = third.Process.Signal(syscall.SIGTERM)
		_ = third.Wait()
	})
	seen = await(lines, "serving PostgreSQL clients")
	require.Contains(t, seen, "already joined at seqno")
	require.NotContains(t, seen, "data: ")
	time.Sleep(2 * time.Second)
	b.halt()
	require.Positive(t, b.commits.Load())
	for i := 0; i < 3; i++ {
		require.NoError(t, c.nodes[i].Replica().SyncRead(ctx))
	}
	tables := c.replicatedTables(0)
	require.Eventually(t, func() bool {
		for _, tb := range tables {
			if c.checksum(j, tb) != c.checksum(0, tb) {
				return false
			}
		}
		return true
	}, 30*time.Second, 200*time.Millisecond, "node %d did not converge", j+1)
	for i := 0; i < 3; i++ {
		c.requireSame(i, j, tables)
	}
	b.check(j)
}

// requireSame checks that nodes i and k have the same rows in tables.
func (c *cluster) requireSame(i, k int, tables []string) {
	for _, tb := range tables {
		require.Equal(c.t, c.checksum(i, tb), c.checksum(k, tb), "table %s: node %d and node %d differ", tb, i+1, k+1)
	}
}

// TestPromoteALearner: ordoctl member add makes a learner, member promote
// makes it a voter through the order (every node sees it so), and the
// cluster keeps committing with the new voter down (three of four); it is
// then removed again.
func TestPromoteALearner(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	octl := buildOrdoctl(t)
	token := filepath.Join(c.cfgs[0].DataDir, admin.TokenFileName)
	member := func(args ...string) []admin.MemberRow {
		t.Helper()
		out, errOut, code := octl.run(append(append([]string{"member"}, args...), "--endpoints", c.nodes[0].AdminAddr(), "--token-file", token, "-o", "json")...)
		require.Zero(t, code, "ordoctl member %v: %s%s", args, out, errOut)
		var ms struct {
			Members []admin.MemberRow `json:"members"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &ms), out)
		return ms.Members
	}
	role := func(ms []admin.MemberRow, id uint64) string {
		for _, m := range ms {
			if m.ID == id {
				return m.Role
			}
		}
		return "none"
	}
	require.Equal(t, "learner", role(member("add", "4", freeAddr(t)), 4))
	require.Equal(t, "voter", role(member("promote", "4"), 4))
	require.Eventually(t, func() bool {
		for _, n := range c.nodes {
			found := false
			for _, mi := range n.Order().MemberInfos() {
				found = found || (mi.ID == 4 && !mi.Learner)
			}
			if !found {
				return false
			}
		}
		return true
	}, 10*time.Second, 100*time.Millisecond, "every node sees node 4 a voter")
	_, err := c.connect(1).Exec(ctx, "CREATE TABLE after_promote (id int PRIMARY KEY)")
	require.NoError(t, err, "three of four voters commit")
	require.Equal(t, "none", role(member("remove", "4"), 4))
}

// lineWriter passes each complete line written to it to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.buf[:i]):
		default:
		}
		w.buf = w.buf[i+1:]
	}
}

// TestJoinDonorKilledDuringTheTransfer: the donor (its Ordo node and its
// PostgreSQL) dies while a joining node copies from it. The join fails
// with the donor's error; run again from another member it starts the
// copy over and completes it, and once the donor is back every node is
// identical.
func TestJoinDonorKilledDuringTheTransfer(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE filler (id int PRIMARY KEY, note text NOT NULL); INSERT INTO filler SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g")
	require.NoError(t, err)
	c.waitConverged()
	j := c.addPostgres()

	progress := &lineWriter{lines: make(chan string, 1000)}
	done := make(chan error, 1)
	go func() { done <- c.startJoin(ctx, j, 1, progress) }()
	var seen []string
	for copying := false; !copying; {
		select {
		case l := <-progress.lines:
			seen = append(seen, l)
			copying = strings.Contains(l, "database settings") // the schema and the rows are next
		case err := <-done:
			t.Fatalf("the join ended before the donor was killed: %v\n%s", err, strings.Join(seen, "\n"))
		case <-time.After(time.Minute):
			t.Fatalf("no progress:\n%s", strings.Join(seen, "\n"))
		}
	}
	c.nodes[1].Stop()
	c.pg.Servers[1].Kill()
	select {
	case err := <-done:
		require.Error(t, err, "the join goes on without its donor")
		t.Logf("join failed as the donor died: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the join neither failed nor finished")
	}

	require.NoError(t, c.startJoin(ctx, j, 0, nil), "again, from node 1")
	require.NoError(t, c.pg.Servers[1].Restart(ctx))
	c.startNode(1)
	require.Eventually(t, func() bool { return c.role(0, j) == "voter" }, 60*time.Second, 200*time.Millisecond)
	_, err = c.connect(j).Exec(ctx, "UPDATE filler SET note = 'after' WHERE id = 1")
	require.NoError(t, err)
	c.waitConverged()
	c.requireIdentical()
}

// A node down for longer than the others' logs keep (log_retention_entries)
// comes back under its own id: restarted, it says its replay point was
// compacted away and how to rejoin; 'ordo join --rejoin' then replaces its
// database with a member's copy while clients keep writing through the
// others, and it catches up from the log, which still holds the
// certification window before the copy. Afterwards the three databases
// are identical, with every acknowledged transfer, and it serves writes.
func TestRejoinAfterTheLogMovedOn(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm", func(cfg *config.Node) {
		cfg.CertificationWindow = 100
		cfg.LogRetentionEntries = 1000
	})
	ctx := context.Background()
	b := newBank(c, 20)
	c.waitConverged()
	b.run([]int{0, 1, 0, 1, 0, 1}, -1)
	time.Sleep(time.Second)
	c.nodes[2].Stop()
	down := c.nodes[2].Order().Delivered()
	deadline := time.Now().Add(3 * time.Minute)
	for min(c.nodes[0].Order().Compacted(), c.nodes[1].Order().Compacted()) <= down {
		require.True(t, time.Now().Before(deadline), "nodes 1 and 2 did not compact past node 3 (at %d; compacted to %d and %d; %d commits)",
			down, c.nodes[0].Order().Compacted(), c.nodes[1].Order().Compacted(), b.commits.Load())
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("node 3 stopped at seqno %d; nodes 1 and 2 compacted to %d and %d", down, c.nodes[0].Order().Compacted(), c.nodes[1].Order().Compacted())

	// Restarted as it was, it cannot catch up from the log and says how
	// to come back.
	c.startNode(2)
	require.Eventually(t, func() bool { return c.replicaErr(2) != "" }, time.Minute, 100*time.Millisecond)
	require.Contains(t, c.replicaErr(2), "too far behind")
	require.Contains(t, c.replicaErr(2), "--rejoin")

	c.rejoin(2, 0)
	// Until it has caught up, its snapshots may be older than the
	// (test-sized) certification window: those abort, and are retried.
	conn := c.connect(2)
	for _, q := range []string{"UPDATE bank SET bal = bal - 1 WHERE id = 1", "UPDATE bank SET bal = bal + 1 WHERE id = 2"} {
		var err error
		for try := 0; try < 100; try++ {
			if _, err = conn.Exec(ctx, q); sqlstate(err) != "40001" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, err, "the rejoined node serves writes: %s (node 3: %s)", q, c.replicaErr(2))
	}

	// A new node joins the compacted cluster the same way: its log starts
	// at a snapshot that includes it, which must not skip the window
	// before its copy.
	n4 := c.addPostgres()
	var out bytes.Buffer
	require.NoError(t, c.startJoin(ctx, n4, 1, &out), out.String())
	time.Sleep(time.Second)
	b.halt()
	require.Empty(t, c.replicaErr(2), "the rejoined node stays")
	require.Empty(t, c.replicaErr(n4), "the new node stays")
	c.waitConverged()
	require.Equal(t, "voter", c.role(0, 2))
	c.requireIdentical()
	for i := range c.nodes {
		b.check(i)
	}
	t.Logf("%d transfers committed, %d aborted", b.commits.Load(), b.aborts.Load())
}
