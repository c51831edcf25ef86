package apply

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/txn"
)

var origin, replica *pglocal.Server

// version is the servers' version; a test of a newer feature skips below it.
var version pglocal.Version

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{N: 2, Settings: map[string]string{"track_commit_timestamp": "on"}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "apply tests need PostgreSQL:", err)
			return 1
		}
		defer c.Stop()
		fmt.Fprintf(os.Stderr, "apply tests on %s (%s)\n", c.Version, c.BinDir)
		origin, replica, version = c.Servers[0], c.Servers[1], c.Version
		defer func() {
			if shared != nil {
				shared.cap.Stop()
			}
		}()
		return m.Run()
	}())
}

const schema = `
SET search_path = public;
CREATE TABLE parent (id int PRIMARY KEY, name text NOT NULL, created timestamptz NOT NULL DEFAULT '2024-01-01 00:00:00+00');
CREATE TABLE child_c (id int PRIMARY KEY, parent_id int REFERENCES parent(id) ON DELETE CASCADE, note text);
CREATE TABLE child_n (id int PRIMARY KEY, parent_id int REFERENCES parent(id) ON DELETE SET NULL);
CREATE TABLE kinds (
	id bigint PRIMARY KEY, n numeric(30,10), f float8, r real, arr int[], tarr text[], j json, jb jsonb, b bytea,
	ts timestamptz, d date, iv interval, u uuid, flag boolean,
	total numeric GENERATED ALWAYS AS (n * 2) STORED, def text DEFAULT 'dflt', nul text);
CREATE TABLE big (id int PRIMARY KEY, v int, body text);
ALTER TABLE big ALTER body SET STORAGE EXTERNAL;
CREATE TABLE audit (id serial PRIMARY KEY, what text);
CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit(what) VALUES (TG_OP || ':' || NEW.id || ':' || NEW.name); RETURN NEW; END $$;
CREATE TRIGGER parent_audit AFTER INSERT OR UPDATE ON parent FOR EACH ROW EXECUTE FUNCTION audit_fn();
CREATE TABLE trunc_p (id int PRIMARY KEY);
CREATE TABLE trunc_c (id int PRIMARY KEY, p int REFERENCES trunc_p);
CREATE TABLE comp (b int, a int, v text, PRIMARY KEY (b, a));
CREATE TABLE ident (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
`

var tables = []string{"ident", "parent", "child_c", "child_n", "kinds", "big", "audit", "trunc_p", "trunc_c", "comp"}

type env struct {
	cap     *capture.Capture
	a, b    *pgx.Conn
	applier *Applier
	seq     uint64
	gids    uint64
	applied []Item
}

func conn(t *testing.T, s *pglocal.Server) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), s.DSN("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	_, err = c.Exec(context.Background(), "SET search_path = public")
	require.NoError(t, err)
	return c
}

func mustExec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	_, err := c.Exec(context.Background(), sql)
	require.NoError(t, err, sql)
}

var shared *env

// setup creates the schema on both servers, a capture on the origin and
// an applier on the replica, once for all tests.
func setup(t *testing.T, cfg Config) *env {
	ctx := context.Background()
	if shared == nil {
		a0, b0 := conn(t, origin), conn(t, replica)
		mustExec(t, a0, schema)
		mustExec(t, b0, schema)
		require.NoError(t, Bootstrap(ctx, b0))
		require.NoError(t, Bootstrap(ctx, b0), "Bootstrap is idempotent")
		c, err := capture.Start(ctx, capture.Config{DSN: origin.DSN("postgres"), AwaitTimeout: 30 * time.Second})
		require.NoError(t, err)
		shared = &env{cap: c}
	}
	e := *shared
	e.a, e.b = conn(t, origin), conn(t, replica)
	cfg.DSN = replica.DSN("postgres")
	ap, err := Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(ap.Close)
	e.applier = ap
	return &e
}

// originTxn runs sql on the origin as a prepared transaction, captures its
// write set and commits it there.
func (e *env) originTxn(t *testing.T, sql ...string) *capture.WriteSet {
	t.Helper()
	shared.gids++
	gid := txn.NewGID(1, shared.gids)
	mustExec(t, e.a, "BEGIN")
	for _, s := range sql {
		mustExec(t, e.a, s)
	}
	mustExec(t, e.a, "PREPARE TRANSACTION '"+string(gid)+"'")
	ws, err := e.cap.Await(context.Background(), gid)
	require.NoError(t, err)
	mustExec(t, e.a, "COMMIT PREPARED '"+string(gid)+"'")
	return ws
}

func (e *env) nextSeq() uint64 { shared.seq++; return shared.seq }

func (e *env) replicate(t *testing.T, sql ...string) Item {
	t.Helper()
	it := Item{Seqno: e.nextSeq(), WriteSet: e.originTxn(t, sql...)}
	applied, err := e.applier.Apply(context.Background(), it.Seqno, it.WriteSet)
	require.NoError(t, err)
	require.True(t, applied)
	shared.applied = append(shared.applied, it)
	return it
}

func dump(t *testing.T, c *pgx.Conn, table string) string {
	t.Helper()
	var s *string
	require.NoError(t, c.QueryRow(context.Background(),
		fmt.Sprintf("SELECT string_agg(x::text, E'\\n' ORDER BY x::text) FROM public.%s x", table)).Scan(&s))
	if s == nil {
		return ""
	}
	return *s
}

func requireSame(t *testing.T, e *env) {
	t.Helper()
	for _, tb := range tables {
		require.Equal(t, dump(t, e.a, tb), dump(t, e.b, tb), "table %s differs", tb)
	}
}

func TestExactness(t *testing.T) {
	e := setup(t, Config{})
	e.replicate(t,
		"INSERT INTO parent (id, name) VALUES (1, 'p1'), (2, 'p2'), (3, 'p3')",
		"INSERT INTO child_c VALUES (10, 1, 'c of 1'), (11, 2, NULL), (12, 1, 'x')",
		"INSERT INTO child_n VALUES (20, 1), (21, 2)",
		`INSERT INTO kinds (id, n, f, r, arr, tarr, j, jb, b, ts, d, iv, u, flag, nul) VALUES
		 (1, 12345678901234567890.0123456789, 0.1, 3.4028235e38, '{1,NULL,3}', '{"a b","c\"d",NULL}',
		  '{"b": 1,  "a": [1, 2], "b": 2}', '{"z": 1, "a": {"k": [true, null]}}', '\x00ff10',
		  '2024-03-01 12:34:56.789012+05:30', '2024-02-29', '1 year 2 mons 3 days 04:05:06.7', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, NULL),
		 (2, -0.0000000001, 'NaN', '-Infinity', '{}', '{}', 'null', '[]', '', 'infinity', '4713-01-01 BC', '-1 day', NULL, false, 'x')`,
		"INSERT INTO big VALUES (1, 0, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g))",
		"INSERT INTO comp VALUES (1, 2, 'c'), (3, 4, 'd')",
		"INSERT INTO trunc_p VALUES (1), (2)", "INSERT INTO trunc_c VALUES (1, 1)")
	requireSame(t, e)

	it := e.replicate(t,
		"UPDATE big SET v = v + 1",                    // TOASTed body unchanged
		"UPDATE parent SET name = 'p2b' WHERE id = 2", // trigger writes audit
		"UPDATE kinds SET jb = jb || '{\"new\": 1}', n = n + 1 WHERE id = 1",
		"UPDATE comp SET a = a + 10 WHERE b = 1") // key change
	var sawUnchanged, sawKeyChange bool
	for _, r := range it.WriteSet.Rows {
		for _, v := range r.Values {
			sawUnchanged = sawUnchanged || v.Kind == capture.Unchanged
		}
		sawKeyChange = sawKeyChange || r.OldKey.Level != 0
	}
	require.True(t, sawUnchanged, "the TOASTed body was not sent as unchanged")
	require.True(t, sawKeyChange)
	requireSame(t, e)

	e.replicate(t, "UPDATE big SET body = body || 'tail'")
	e.replicate(t, "DELETE FROM parent WHERE id = 1") // cascade + set null
	e.replicate(t, "TRUNCATE trunc_p CASCADE")
	e.replicate(t, "INSERT INTO trunc_p VALUES (5)", "DELETE FROM kinds WHERE id = 2")
	requireSame(t, e)
	require.NotEmpty(t, dump(t, e.b, "audit"))

	// Replay of everything already applied is skipped: exactly once.
	for _, it := range shared.applied {
		applied, err := e.applier.Apply(context.Background(), it.Seqno, it.WriteSet)
		require.NoError(t, err)
		require.False(t, applied)
	}
	requireSame(t, e)
	p, err := e.applier.AppliedPrefix(context.Background())
	require.NoError(t, err)
	require.Equal(t, shared.seq, p)
}

func TestBruteForceAbort(t *testing.T) {
	var seen atomic.Value
	e := setup(t, Config{LockTimeout: 10 * time.Second})
	e.replicate(t, "INSERT INTO comp VALUES (500, 1, 'bf')")
	local := conn(t, replica)
	mustExec(t, local, "BEGIN")
	mustExec(t, local, "UPDATE comp SET v = 'local' WHERE b = 500") // then idle in transaction
	var localPID int
	require.NoError(t, local.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&localPID))

	killer := conn(t, replica)
	e.applier.cfg.OnBlocked = func(pids []int, _ bool) {
		seen.Store(pids)
		for _, p := range pids {
			_, _ = killer.Exec(context.Background(), "SELECT pg_terminate_backend($1)", p)
		}
	}
	began := time.Now()
	e.replicate(t, "UPDATE comp SET v = 'remote' WHERE b = 500")
	require.Less(t, time.Since(began), 5*time.Second, "the apply waited for the lock timeout instead of aborting the blocker")
	require.Equal(t, []int{localPID}, seen.Load())
	requireSame(t, e)
}

// TestBlockersOnlyForLockWaits: the monitor reports the backends that
// hold a lock a backend waits for, and nothing for one that waits for no
// lock (it is only slow) or one that is gone.
func TestBlockersOnlyForLockWaits(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{})
	holder, waiter := conn(t, replica), conn(t, replica)
	pidOf := func(c *pgx.Conn) int {
		var pid int
		require.NoError(t, c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		return pid
	}
	holderPID, waiterPID := pidOf(holder), pidOf(waiter)

	pids, err := e.applier.blockers(ctx, waiterPID)
	require.NoError(t, err)
	require.Empty(t, pids, "an idle backend")

	mustExec(t, holder, "SELECT pg_advisory_lock(4242)")
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, "SELECT pg_advisory_lock(4242)")
		done <- err
	}()
	require.Eventually(t, func() bool {
		pids, err = e.applier.blockers(ctx, waiterPID)
		return err == nil && len(pids) == 1
	}, 5*time.Second, 10*time.Millisecond, "a backend waiting for a lock another holds")
	require.Equal(t, []int{holderPID}, pids)
	mustExec(t, holder, "SELECT pg_advisory_unlock(4242)")
	require.NoError(t, <-done)

	slow := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, "SELECT pg_sleep(2)")
		slow <- err
	}()
	require.Eventually(t, func() bool {
		var ev string
		err := holder.QueryRow(ctx, "SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1", waiterPID).Scan(&ev)
		return err == nil && ev == "PgSleep"
	}, 5*time.Second, 10*time.Millisecond, "the other session sleeping")
	pids, err = e.applier.blockers(ctx, waiterPID)
	require.NoError(t, err)
	require.Empty(t, pids, "a backend that runs long without waiting for a lock")
	require.NoError(t, <-slow)

	pids, err = e.applier.blockers(ctx, 1<<30)
	require.NoError(t, err)
	require.Empty(t, pids, "no such backend")
}

func TestCrashMidApplyExactlyOnce(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{LockTimeout: 20 * time.Second})
	e.replicate(t, "INSERT INTO comp VALUES (600, 1, 'crash')")
	it := Item{Seqno: e.nextSeq(), WriteSet: e.originTxn(t,
		"INSERT INTO comp VALUES (601, 1, 'new')",
		"UPDATE comp SET v = 'after' WHERE b = 600")}

	// A local transaction makes the apply wait mid-way (after its insert).
	local := conn(t, replica)
	mustExec(t, local, "BEGIN")
	mustExec(t, local, "UPDATE comp SET v = 'hold' WHERE b = 600")
	done := make(chan error, 1)
	go func() {
		_, err := e.applier.Apply(ctx, it.Seqno, it.WriteSet)
		done <- err
	}()
	pid := e.applier.PIDs()[0]
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, local.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting))
		return waiting
	}, 10*time.Second, 20*time.Millisecond)
	// Kill the applier's connection mid-apply.
	killer := conn(t, replica)
	mustExec(t, killer, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid))
	time.Sleep(200 * time.Millisecond)
	mustExec(t, local, "ROLLBACK")
	require.NoError(t, <-done, "the applier reconnects and retries")
	require.NotEqual(t, pid, e.applier.PIDs()[0])

	// Replaying it (as recovery would) changes nothing.
	applied, err := e.applier.Apply(ctx, it.Seqno, it.WriteSet)
	require.NoError(t, err)
	require.False(t, applied)
	var n int
	require.NoError(t, e.b.QueryRow(ctx, "SELECT count(*) FROM _ordo.applied WHERE gid = $1", string(it.WriteSet.GID)).Scan(&n))
	require.Equal(t, 1, n)
	requireSame(t, e)
}

func TestParallelApplyOrdered(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{Workers: 4})
	var items []Item
	for i := 0; i < 24; i++ {
		id := 1000 + i%6 // conflicts: every 6th write set touches the same row
		sql := fmt.Sprintf("INSERT INTO comp VALUES (%d, %d, 'v') ON CONFLICT (b, a) DO UPDATE SET v = comp.v || '+%d'", id, i, i)
		items = append(items, Item{Seqno: e.nextSeq(), WriteSet: e.originTxn(t, sql,
			fmt.Sprintf("INSERT INTO parent (id, name) VALUES (%d, 'n') ON CONFLICT (id) DO UPDATE SET name = parent.name || '%d'", id, i))})
	}
	require.NoError(t, e.applier.ApplyBatch(ctx, items))
	requireSame(t, e)
	// Commits happened in seqno order.
	rows, err := e.b.Query(ctx, "SELECT seqno FROM _ordo.applied WHERE seqno >= $1 ORDER BY pg_xact_commit_timestamp(xmin), seqno", int64(items[0].Seqno))
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, seqs, len(items))
	for i := range seqs {
		require.Equal(t, int64(items[i].Seqno), seqs[i])
	}
}

// TestPreparedStatements: a worker prepares each statement shape once,
// forgets its statements when it holds maxPrepared of them and when told
// to (after DDL), and applies exactly all the while.
func TestPreparedStatements(t *testing.T) {
	defer func(n int) { maxPrepared = n }(maxPrepared)
	maxPrepared = 3
	e := setup(t, Config{})
	w := e.applier.workers[0]
	e.replicate(t, "INSERT INTO comp VALUES (700, 1, 'a')")
	require.Len(t, w.prepared, 2, "the proof row and the insert")
	e.replicate(t, "INSERT INTO comp VALUES (701, 1, 'b')")
	require.Len(t, w.prepared, 2, "the same shapes again")
	e.replicate(t, "UPDATE comp SET v = 'c' WHERE b = 700")
	require.Len(t, w.prepared, 3)
	e.replicate(t, "DELETE FROM comp WHERE b = 701") // a fourth shape: the three are forgotten first
	require.Len(t, w.prepared, 2, "the proof row and the delete")
	var n int
	require.NoError(t, w.conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'ordo_apply_%'").Scan(&n))
	require.Equal(t, 2, n, "forgotten statements are deallocated")
	e.replicate(t, "INSERT INTO comp VALUES (702, 1, 'e'), (703, 1, 'f')", "UPDATE comp SET v = 'g' WHERE b = 702",
		"DELETE FROM comp WHERE b = 703") // four shapes at once: more than maxPrepared, applied unprepared
	requireSame(t, e)
	e.applier.Forget(context.Background())
	require.Empty(t, w.prepared)
	e.replicate(t, "UPDATE comp SET v = 'd' WHERE b = 700")
	requireSame(t, e)
}

// TestCopyApply: long runs of inserts into one table are applied with COPY
// and land exactly as the statements would have put them: tabs, newlines,
// backslashes, a lone "\." and the text "\N" in values, NULLs, arrays and
// JSON, every type of the kinds table.
func TestCopyApply(t *testing.T) {
	defer func(n int) { copyMinRows = n }(copyMinRows)
	copyMinRows = 3
	e := setup(t, Config{})
	it := e.replicate(t,
		`INSERT INTO kinds (id, n, f, r, arr, tarr, j, jb, b, ts, d, iv, u, flag, nul) VALUES
		 (101, 1.5, 0.1, 1, '{1,NULL}', E'{"tab\there","back\\\\slash","new\nline",NULL}', E'{"k": "a\\tb"}', E'{"k": "\\\\."}',
		  '\x5c2e0a', '2024-03-01 12:00+00', '2024-02-29', '1 day', NULL, true, E'\\.'),
		 (102, NULL, 'Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, E'line1\nline2\r\n\\N'),
		 (103, 0, -0.0, 'NaN', '{}', '{}', '[]', '{}', '', '-infinity', '2000-01-01', '0', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', false, '\N'),
		 (104, 2, 2, 2, '{2}', '{"x"}', '2', '2', '\x00', '2024-01-01', '2024-01-01', '2 days', NULL, NULL, E'\t')`,
		`INSERT INTO comp SELECT g, g, E'v\t' || g || E'\\' FROM generate_series(1000, 1010) g`)
	segs := 0
	stmts, err := statements(it.WriteSet)
	require.NoError(t, err)
	for _, s := range segments(stmts) {
		if s.copy {
			segs++
		}
	}
	require.Equal(t, 2, segs, "both runs went through COPY")
	requireSame(t, e)

	// A statement trigger that fires in replica mode: the rows are
	// inserted one statement at a time, so it fires once per row as on a
	// run of INSERTs.
	ctx := context.Background()
	for _, c := range []*pgx.Conn{e.a, e.b} {
		mustExec(t, c, `CREATE TABLE fired (n int);
			CREATE FUNCTION count_fired() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO fired VALUES (1); RETURN NULL; END $$;
			CREATE TRIGGER comp_fired AFTER INSERT ON comp FOR EACH STATEMENT EXECUTE FUNCTION count_fired();
			ALTER TABLE comp ENABLE ALWAYS TRIGGER comp_fired`)
	}
	defer func() {
		for _, c := range []*pgx.Conn{e.a, e.b} {
			mustExec(t, c, "DROP TRIGGER comp_fired ON comp; DROP FUNCTION count_fired(); DROP TABLE fired")
		}
	}()
	w := e.applier.workers[0]
	mustExec(t, w.conn, "BEGIN")
	defer func() { _, _ = w.conn.Exec(context.Background(), "ROLLBACK") }() // before the DROPs above, even on failure
	var rows []capture.Row
	tbl := it.WriteSet.Rows[len(it.WriteSet.Rows)-1].Table
	for i := range 4 {
		rows = append(rows, capture.Row{Op: capture.OpInsert, Table: tbl, Values: []capture.Value{
			{Kind: capture.Text, Text: fmt.Sprint(5000 + i)}, {Kind: capture.Text, Text: "1"}, {Kind: capture.Null}}})
	}
	stmts, err = statements(&capture.WriteSet{GID: "t", Rows: rows})
	require.NoError(t, err)
	copied, err := e.applier.copyRows(ctx, w, 0, stmts, nil, false)
	require.NoError(t, err)
	require.False(t, copied, "a table whose trigger fires in replica mode is not copied")
	var fired int
	require.NoError(t, w.conn.QueryRow(ctx, "SELECT count(*) FROM fired").Scan(&fired))
	require.Equal(t, 4, fired, "once per row, as with one INSERT per row")
}

func TestSegments(t *testing.T) {
	defer func(n int) { copyMinRows = n }(copyMinRows)
	copyMinRows = 3
	ins := func(sql string) stmt { return stmt{sql: sql, row: &capture.Row{Op: capture.OpInsert}} }
	upd := stmt{sql: "u", row: &capture.Row{Op: capture.OpUpdate}}
	in := []stmt{ins("a"), ins("a"), upd, ins("a"), ins("a"), ins("a"), ins("b"), ins("b"), upd, upd, upd, ins("c"), ins("c"), ins("c"), ins("c")}
	var got []string
	for _, s := range segments(in) {
		got = append(got, fmt.Sprintf("%v:%d", s.copy, len(s.stmts)))
	}
	require.Equal(t, []string{"false:3", "true:3", "false:5", "true:4"}, got)
}

// TestIdentityAlwaysColumns: rows of a table with a GENERATED ALWAYS
// identity column are applied with the origin's values, one statement at a
// time and by COPY.
func TestIdentityAlwaysColumns(t *testing.T) {
	e := setup(t, Config{})
	e.replicate(t, "INSERT INTO ident (v) VALUES ('a'), ('b')")
	defer func(n int) { copyMinRows = n }(copyMinRows)
	copyMinRows = 3
	e.replicate(t, "INSERT INTO ident (v) SELECT 'c' || g FROM generate_series(1, 5) g")
	requireSame(t, e)
	require.Contains(t, dump(t, e.b, "ident"), "(7,c5)")
}

// TestVirtualGeneratedColumns: PostgreSQL 18 makes GENERATED ALWAYS AS
// columns virtual by default. pgoutput never sends them (nor stored ones),
// so the applier must neither name them nor miss them: the replica
// computes them itself.
func TestVirtualGeneratedColumns(t *testing.T) {
	if version.Major < 18 {
		t.Skipf("virtual generated columns need PostgreSQL 18; running %s", version)
	}
	e := setup(t, Config{})
	const ddl = "CREATE TABLE virt (id int PRIMARY KEY, n int, twice int GENERATED ALWAYS AS (n * 2), " +
		"stored int GENERATED ALWAYS AS (n + 1) STORED, v text)"
	mustExec(t, e.a, ddl)
	mustExec(t, e.b, ddl)
	t.Cleanup(func() {
		mustExec(t, e.a, "DROP TABLE virt")
		mustExec(t, e.b, "DROP TABLE virt")
	})
	var kind string
	require.NoError(t, e.b.QueryRow(context.Background(),
		"SELECT attgenerated::text FROM pg_attribute WHERE attrelid = 'virt'::regclass AND attname = 'twice'").Scan(&kind))
	require.Equal(t, "v", kind, "twice is not a virtual generated column")

	e.replicate(t, "INSERT INTO virt (id, n, v) VALUES (1, 10, 'a'), (2, 20, 'b')")
	defer func(n int) { copyMinRows = n }(copyMinRows)
	copyMinRows = 3
	e.replicate(t, "INSERT INTO virt (id, n, v) SELECT g, g, 'c' || g FROM generate_series(3, 8) g")
	e.replicate(t, "UPDATE virt SET n = n + 100 WHERE id IN (1, 3)", "DELETE FROM virt WHERE id = 2")
	require.Equal(t, dump(t, e.a, "virt"), dump(t, e.b, "virt"))
	require.Contains(t, dump(t, e.b, "virt"), "(1,110,220,111,a)")
}

// TestLostCommitsStopTheApplier: when PostgreSQL loses applies it had
// acknowledged (a backend crash reinitializes it and drops the unwritten
// WAL tail; pg_postmaster_start_time() does not change), the applier's
// next connection finds the proof row of its last commit missing and says
// the node must replay, instead of carrying on with a replica that lacks
// rows. Simulated here by deleting that proof row and killing the
// applier's connection.
func TestLostCommitsStopTheApplier(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{})
	last := e.replicate(t, "INSERT INTO comp VALUES (7700, 1, 'kept')")
	b := conn(t, replica)
	mustExec(t, b, fmt.Sprintf("DELETE FROM _ordo.applied WHERE seqno = %d", last.Seqno))
	mustExec(t, b, fmt.Sprintf("SELECT pg_terminate_backend(%d)", e.applier.PIDs()[0]))
	it := Item{Seqno: e.nextSeq(), WriteSet: e.originTxn(t, "INSERT INTO comp VALUES (7701, 1, 'next')")}
	_, err := e.applier.Apply(ctx, it.Seqno, it.WriteSet)
	require.ErrorIs(t, err, ErrPostgresRestarted)
	require.ErrorContains(t, err, "lost commits")
	// Put the proof back for the tests that follow (they share the servers).
	mustExec(t, b, fmt.Sprintf("INSERT INTO _ordo.applied (seqno, gid) VALUES (%d, '%s')", last.Seqno, last.WriteSet.GID))
	shared.applied = shared.applied[:len(shared.applied)-1]
	mustExec(t, b, "DELETE FROM comp WHERE b = 7700")
	mustExec(t, conn(t, origin), "DELETE FROM comp WHERE b IN (7700, 7701)")
}

// TestTablesWithoutPrimaryKey: updates and deletes of a table without a
// primary key (REPLICA IDENTITY FULL) find their row by its old values,
// whatever the column types, NULLs included; of identical rows exactly
// one changes; a TOASTed value the update left alone stays.
func TestTablesWithoutPrimaryKey(t *testing.T) {
	e := setup(t, Config{})
	ddl := `CREATE TABLE nopk (i int, n numeric, f float8, j json, jb jsonb, p point, iv interval, ts timestamptz,
		arr int[], flag boolean, t text, body text);
		ALTER TABLE nopk ALTER body SET STORAGE EXTERNAL`
	mustExec(t, e.a, ddl)
	mustExec(t, e.b, ddl)
	mustExec(t, e.a, capture.ReplicaIdentitySQL)
	dumpBoth := func() {
		t.Helper()
		require.Equal(t, dump(t, e.a, "nopk"), dump(t, e.b, "nopk"))
	}
	e.replicate(t, `INSERT INTO nopk VALUES
		(1, 1.0, -0, '{"a": 1}', '{"a": 1.0}', '(1,2)', '1 day', '2024-01-01 00:00:00+00', '{1,NULL}', true, 'same', NULL),
		(1, 1.0, -0, '{"a": 1}', '{"a": 1.0}', '(1,2)', '1 day', '2024-01-01 00:00:00+00', '{1,NULL}', true, 'same', NULL),
		(2, 1.00, 0, '{"a":1}', '{"a": 1.00}', '(1,2)', '24 hours', '2024-01-01 01:00:00+01', '{1,NULL}', true, 'same', NULL),
		(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(3, 0, 0, 'null', 'null', '(0,0)', '0', 'infinity', '{}', false, 'toast', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 4000) g))`)
	dumpBoth()
	// One of two identical rows; the row equal to them but for the text
	// forms (1.00, 0, 24 hours…) stays as it is.
	it := e.replicate(t, "UPDATE nopk SET t = 'changed' WHERE ctid = (SELECT min(ctid) FROM nopk WHERE i = 1)")
	require.Len(t, it.WriteSet.Rows, 1)
	require.Equal(t, capture.FullRowKey(it.WriteSet.Rows[0].Table, it.WriteSet.Rows[0].OldRow), it.WriteSet.Rows[0].Key)
	dumpBoth()
	var n int
	require.NoError(t, e.b.QueryRow(context.Background(), "SELECT count(*) FROM nopk WHERE t = 'changed'").Scan(&n))
	require.Equal(t, 1, n)
	e.replicate(t, "UPDATE nopk SET t = 'all nulls' WHERE i IS NULL")
	e.replicate(t, "UPDATE nopk SET flag = true WHERE i = 3") // the TOASTed body is not sent
	dumpBoth()
	e.replicate(t, "DELETE FROM nopk WHERE i = 2")
	e.replicate(t, "DELETE FROM nopk WHERE ctid = (SELECT min(ctid) FROM nopk WHERE i = 1)")
	dumpBoth()
	require.NoError(t, e.b.QueryRow(context.Background(), "SELECT count(*) FROM nopk").Scan(&n))
	require.Equal(t, 3, n)
	// A row that is not there is a divergence, as for a keyed row.
	ws := e.originTxn(t, "DELETE FROM nopk WHERE i = 3")
	mustExec(t, e.b, "DELETE FROM nopk WHERE i = 3")
	_, err := e.applier.Apply(context.Background(), e.nextSeq(), ws)
	require.Error(t, err)
}

// TestDivergedApplyCommitsNothing: an update of a row the replica does not
// have is a divergence, and the apply must commit none of its transaction
// (neither its other rows nor its proof row), so that the cluster's vote on
// it (replica/vote.go) can skip it on every node that failed. A small write
// set used to go in one round trip with its COMMIT, which committed it
// before its row counts were checked; a second Apply then took it as done.
func TestDivergedApplyCommitsNothing(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{})
	mustExec(t, e.a, "INSERT INTO comp VALUES (8700, 1, 'origin only')") // not replicated
	it := Item{Seqno: e.nextSeq(), WriteSet: e.originTxn(t,
		"INSERT INTO comp VALUES (8701, 1, 'new')",
		"UPDATE comp SET v = 'changed' WHERE b = 8700")}
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := e.applier.Apply(ctx, it.Seqno, it.WriteSet)
		require.ErrorIs(t, err, ErrDiverged, "attempt %d", attempt)
		var rows, proofs int
		require.NoError(t, e.b.QueryRow(ctx, "SELECT count(*) FROM comp WHERE b = 8701").Scan(&rows))
		require.NoError(t, e.b.QueryRow(ctx, "SELECT count(*) FROM _ordo.applied WHERE seqno = $1", it.Seqno).Scan(&proofs))
		require.Zero(t, rows, "attempt %d: the transaction's other row was committed", attempt)
		require.Zero(t, proofs, "attempt %d: the proof row was committed", attempt)
	}
	// Put things back as the other tests expect them: the seqno decided
	// (skipped, as the cluster's vote would), the origin's rows gone.
	applied, err := e.applier.Apply(ctx, it.Seqno, &capture.WriteSet{GID: it.WriteSet.GID})
	require.NoError(t, err)
	require.True(t, applied)
	mustExec(t, e.a, "DELETE FROM comp WHERE b IN (8700, 8701)")
	requireSame(t, e)
}

// TestAppliesRunUnderAnOrigin: on PostgreSQL 16 and later an apply commits
// under the worker's replication origin (the capture stream then leaves it
// out), also after its connection was lost and reopened; on 15 it commits
// without one.
func TestAppliesRunUnderAnOrigin(t *testing.T) {
	ctx := context.Background()
	e := setup(t, Config{})
	b := conn(t, replica)
	var num int
	require.NoError(t, b.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num))
	want := ""
	if num >= capture.OriginFilterVersion {
		want = "ordo_apply_0"
	}
	originOf := func(id int) string {
		var name *string
		require.NoError(t, b.QueryRow(ctx, `SELECT o.roname FROM comp c
			LEFT JOIN pg_replication_origin o ON o.roident = (pg_xact_commit_timestamp_origin(c.xmin)).roident
			WHERE c.b = $1`, id).Scan(&name))
		if name == nil {
			return ""
		}
		return *name
	}
	e.replicate(t, "INSERT INTO comp VALUES (7800, 1, 'first')")
	require.Equal(t, want, originOf(7800), "PostgreSQL %d", num)

	mustExec(t, b, fmt.Sprintf("SELECT pg_terminate_backend(%d)", e.applier.PIDs()[0]))
	e.replicate(t, "INSERT INTO comp VALUES (7801, 1, 'after a reconnect')")
	require.Equal(t, want, originOf(7801), "PostgreSQL %d: the new connection takes the origin again", num)
	// Each apply has its own commit timestamp (a session under an origin
	// would otherwise stamp every commit with its first one's).
	time.Sleep(20 * time.Millisecond)
	e.replicate(t, "INSERT INTO comp VALUES (7802, 1, 'third')")
	var later bool
	require.NoError(t, b.QueryRow(ctx, `SELECT (SELECT pg_xact_commit_timestamp(xmin) FROM comp WHERE b = 7802)
		> (SELECT pg_xact_commit_timestamp(xmin) FROM comp WHERE b = 7801)`).Scan(&later))
	require.True(t, later, "the later apply has a later commit timestamp")
	requireSame(t, e)
}
