package safety

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/internal/proccluster"
	"github.com/ordo-db/ordo/test/safety/history"
)

// Config describes one run.
type Config struct {
	Protocol  string   // dbsm, dbsm-si, pgr, cons or dbsm-rc
	Workloads []string // bank, append, wskew, sets; run at once, each on its own tables
	Nemeses   []string // names from nemeses (nemesis.go): kill, partition, pause, …; faults take turns; none: no faults
	Duration  time.Duration
	// Clients per workload (default 6), spread over the nodes.
	Clients int
	// FaultTime is how long each fault lasts (default 4s); QuietTime the
	// healed time after it (default 3s).
	FaultTime, QuietTime time.Duration
	// FaultNode, if set (1-based), is the node every fault hits; 0 picks
	// a random node for each fault.
	FaultNode int
	// Dir receives history.jsonl, report.txt and cluster/ (the nodes'
	// configurations and logs). Required.
	Dir string
	// Bin is the ordo binary (empty: built into Dir).
	Bin string
	// Converge bounds the wait for identical data after healing (default 120s).
	Converge time.Duration
	// Seed of the clients' and the nemesis' choices (0: from the clock).
	Seed uint64
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
	// Serializable: every transaction of the workloads begins with BEGIN
	// ISOLATION LEVEL SERIALIZABLE, and the checks hold them to
	// serializability whatever the protocol (under dbsm-si and dbsm-rc,
	// protocols.md "SERIALIZABLE on demand").
	Serializable bool
	// Witness runs two data nodes and a witness ('ordo witness', node 3,
	// no PostgreSQL) instead of three data nodes; faults hit the data
	// nodes, and the witness is what lets one of them commit without the
	// other.
	Witness bool
}

// Report is the outcome of a run.
type Report struct {
	Dir string
	// Problems is empty when the run passed: each is a forbidden anomaly
	// or a failed final check.
	Problems []string
	// Text is report.txt.
	Text string
}

// model is the isolation the checks hold the run to: its protocol's, or
// "serializable" (Config.Serializable).
func (r *run) model() string {
	if r.cfg.Serializable {
		return "serializable"
	}
	return r.cfg.Protocol
}

// run is the state of one Run.
type run struct {
	cfg       Config
	cluster   *proccluster.Cluster
	rec       *history.Recorder
	seed      uint64
	workloads []workload

	mu       sync.Mutex
	nextProc int
	owner    map[int]string // process → workload
	windows  []window       // nemesis windows
	problems []string
	notes    []string // supervisor restarts and the like, for the report
	nodeMu   map[int]*nodeMutex
	stopped  time.Duration // when the workloads stopped
	resolved resolution    // what the outcome check answered
}

func (r *run) newClient(owner string, node int) *client {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.nextProc
	r.nextProc++
	r.owner[p] = owner
	return &client{process: p, node: node, dsn: r.cluster.DSN(node), rec: r.rec, serializable: r.cfg.Serializable}
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf("%7.1fs ", r.rec.Since().Seconds())+fmt.Sprintf(format, args...))
}

// Run starts a 3-node cluster, runs the workloads under the nemeses for
// cfg.Duration, heals, waits for convergence, checks everything and writes
// the report. The error is for a run that could not be carried out (the
// cluster did not start); what the run found is in Report.Problems.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 6
	}
	if cfg.FaultTime <= 0 {
		cfg.FaultTime = 4 * time.Second
	}
	if cfg.QuietTime <= 0 {
		cfg.QuietTime = 3 * time.Second
	}
	// The nemesis starts 2 s into the run and leaves a second after its
	// last fault: a short run gets one shorter fault rather than none (a
	// run under a nemesis that injected nothing is a problem, below).
	if len(cfg.Nemeses) > 0 && cfg.Duration < 3*time.Second+cfg.FaultTime {
		cfg.FaultTime = max(cfg.Duration-3*time.Second-200*time.Millisecond, time.Second)
	}
	if cfg.Converge <= 0 {
		cfg.Converge = 120 * time.Second
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Dir == "" {
		return nil, errors.New("safety: Config.Dir required")
	}
	r := &run{cfg: cfg, seed: cfg.Seed, owner: map[int]string{}}
	for _, name := range cfg.Workloads {
		w, err := newWorkload(name)
		if err != nil {
			return nil, err
		}
		r.workloads = append(r.workloads, w)
	}
	for _, n := range cfg.Nemeses {
		if _, ok := nemeses[n]; !ok {
			return nil, fmt.Errorf("safety: unknown nemesis %q (%s)", n, nemesisNames())
		}
	}
	clusterDir := filepath.Join(cfg.Dir, "cluster")
	if err := os.MkdirAll(clusterDir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if r.rec, err = history.Create(filepath.Join(cfg.Dir, "history.jsonl")); err != nil {
		return nil, err
	}
	defer r.rec.Close()
	r.logf("starting 3 nodes (%s) in %s", cfg.Protocol, cfg.Dir)
	slowPG := slices.Contains(cfg.Nemeses, "slow-pg-fsync")
	dataNodes := 3
	if cfg.Witness {
		dataNodes = 2
	}
	r.cluster, err = proccluster.Start(ctx, proccluster.Options{N: dataNodes, Witness: cfg.Witness, Protocol: cfg.Protocol, Dir: clusterDir, Bin: cfg.Bin, SlowPGSync: slowPG})
	if err != nil {
		// Ports are picked free and then bound by the processes; on a
		// machine shared with other tests one can be taken in between.
		// Try once more, in a fresh directory.
		r.logf("cluster did not start (%v); trying once more", err)
		clusterDir = filepath.Join(cfg.Dir, "cluster-retry")
		if err := os.MkdirAll(clusterDir, 0o755); err != nil {
			return nil, err
		}
		r.cluster, err = proccluster.Start(ctx, proccluster.Options{N: dataNodes, Witness: cfg.Witness, Protocol: cfg.Protocol, Dir: clusterDir, Bin: cfg.Bin, SlowPGSync: slowPG})
		if err != nil {
			return nil, err
		}
	}
	defer r.cluster.Stop()

	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	began := r.rec.Since()
	r.logf("running %v under %v for %s (seed %d)", cfg.Workloads, cfg.Nemeses, cfg.Duration, cfg.Seed)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range r.workloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(r, stop)
		}()
	}
	nemesisDone := make(chan struct{})
	supervisorStop := make(chan struct{})
	var supervisor sync.WaitGroup
	supervisor.Add(1)
	go func() {
		defer supervisor.Done()
		r.supervise(supervisorStop)
	}()
	go func() {
		defer close(nemesisDone)
		r.nemesis(began + cfg.Duration)
	}()
	<-nemesisDone
	if len(cfg.Nemeses) > 0 && len(r.windows) == 0 {
		r.problem("no fault was injected: a run under %v must last more than %s (SAFETY_TIME)", cfg.Nemeses, 3*time.Second+cfg.FaultTime)
	}
	for r.rec.Since() < began+cfg.Duration {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	r.stopped = r.rec.Since()
	r.logf("workloads stopped at %.1fs; healing and waiting for convergence", r.rec.Since().Seconds())

	// The supervisor keeps restarting exited nodes until the checks end.
	r.healAll()
	if r.converge(ctx) {
		r.serving(ctx)
		r.converge(ctx)
	}
	for _, w := range r.workloads {
		for _, p := range w.final(r) {
			r.problem("%s", p)
		}
	}
	close(supervisorStop)
	supervisor.Wait()
	r.finalChecks(ctx)
	r.resolved = r.resolve(ctx)
	r.knownBugs()
	r.failureEvidence()
	rep := r.report()
	if err := os.WriteFile(filepath.Join(cfg.Dir, "report.txt"), []byte(rep.Text), 0o644); err != nil {
		return rep, err
	}
	plot := latencyPlot(history.Pair(r.rec.Events()), r.windows, r.stopped, r.owner)
	if err := os.WriteFile(filepath.Join(cfg.Dir, "latency.svg"), []byte(plot), 0o644); err != nil {
		return rep, err
	}
	if len(rep.Problems) == 0 {
		// Keep the logs and configurations, not the Raft data.
		for i := 0; i < r.cluster.N(); i++ {
			_ = os.RemoveAll(filepath.Join(clusterDir, fmt.Sprint("node", i+1)))
		}
	}
	return rep, nil
}

func (r *run) setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cluster.DSN(0))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE safety_probe (id int PRIMARY KEY, n int NOT NULL)"); err != nil {
		return fmt.Errorf("safety: setup: %w", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO safety_probe SELECT g, 0 FROM generate_series(1, $1) g", r.cluster.N()); err != nil {
		return fmt.Errorf("safety: setup: %w", err)
	}
	for _, w := range r.workloads {
		if err := w.setup(ctx, conn); err != nil {
			return fmt.Errorf("safety: setup %s: %w", w.name(), err)
		}
	}
	// Wait until every node has the tables.
	if !r.settled(ctx, r.cfg.Converge) {
		return fmt.Errorf("safety: setup did not reach every node:\n%s", r.state(ctx))
	}
	return nil
}

// healAll ends every fault: links restored, every PostgreSQL server that
// is down restarted, every paused node resumed, every stopped node started.
func (r *run) healAll() {
	r.cluster.Heal()
	for i := 0; i < r.cluster.N(); i++ {
		if !r.cluster.PGRunning(i) {
			r.note("heal: node %d's PostgreSQL was down; starting it", i+1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := r.cluster.RestartPG(ctx, i); err != nil {
				r.problem("node %d's PostgreSQL did not start after healing: %v", i+1, err)
			}
			cancel()
		}
	}
	for i := 0; i < r.cluster.N(); i++ {
		l := r.nodeLock(i) // not at the same time as the supervisor
		l.Lock()
		r.cluster.Resume(i)
		if r.cluster.Exited(i) {
			r.cluster.Kill(i)
			r.note("heal: node %d was down; starting it", i+1)
			if err := r.cluster.Start(i); err != nil {
				r.problem("node %d did not start after healing: %v", i+1, err)
			}
		}
		l.Unlock()
	}
}

// connDigester is a workload whose digest takes more than one query.
type connDigester interface {
	digestConn(ctx context.Context, conn *pgx.Conn) (string, error)
}

// digests answers every workload's digest on node i's PostgreSQL, and its
// number of prepared transactions.
func (r *run) digests(ctx context.Context, i int) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := pgx.Connect(ctx, r.cluster.PGDSN(i))
	if err != nil {
		return "", 0, err
	}
	defer d.Close(ctx)
	var parts []string
	var probe string
	if err := d.QueryRow(ctx, "SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM safety_probe").Scan(&probe); err != nil {
		return "", 0, err
	}
	parts = append(parts, probe)
	for _, w := range r.workloads {
		var s string
		var err error
		if dc, ok := w.(connDigester); ok {
			s, err = dc.digestConn(ctx, d)
		} else {
			err = d.QueryRow(ctx, w.digest()).Scan(&s)
		}
		if err != nil {
			return "", 0, err
		}
		parts = append(parts, s)
	}
	var prepared int
	if err := d.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil {
		return "", 0, err
	}
	return strings.Join(parts, "\n"), prepared, nil
}

// settled waits up to d for identical digests and no prepared transaction
// on every node.
func (r *run) settled(ctx context.Context, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
		seen := map[string]bool{}
		ok := true
		for i := 0; i < r.cluster.N() && ok; i++ {
			s, prepared, err := r.digests(ctx, i)
			ok = err == nil && prepared == 0
			seen[s] = true
		}
		if ok && len(seen) == 1 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (r *run) converge(ctx context.Context) bool {
	began := time.Now()
	if r.settled(ctx, r.cfg.Converge) {
		r.note("converged in %s", time.Since(began).Round(100*time.Millisecond))
		return true
	}
	r.problem("nodes did not converge within %s (identical data, no prepared transactions):\n%s", r.cfg.Converge, r.state(ctx))
	return false
}

// serving checks that an update through every node commits (retrying
// certification failures for 30s).
func (r *run) serving(ctx context.Context) {
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient("probe", i)
		var last string
		ok := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			typ, err := c.txnless("probe", i+1, "UPDATE safety_probe SET n = n + 1 WHERE id = $1", i+1)
			if typ == history.OK {
				ok = true
				break
			}
			last = fmt.Sprint(err)
			if typ == history.Info {
				break // its outcome is unknown: the digest would be ambiguous
			}
		}
		c.close()
		if !ok {
			r.problem("node %d is not serving: an update through it did not commit (%s)", i+1, last)
		}
	}
}

// finalChecks: nothing prepared, no unreplicated commit, every node's data
// identical (checked by converge), the histories checked.
func (r *run) finalChecks(ctx context.Context) {
	for i := 0; i < r.cluster.N(); i++ {
		if r.cluster.Exited(i) {
			r.problem("node %d exited during the final checks:\n%s", i+1, proccluster.Tail(r.cluster.LogFile(i), 20))
			continue
		}
		v, err := r.cluster.Metric(i, "ordo_capture_unreplicated_commits_total")
		if err != nil {
			r.problem("node %d: metrics: %v", i+1, err)
		} else if v != 0 {
			r.problem("node %d: ordo_capture_unreplicated_commits_total = %v", i+1, v)
		}
	}
	for i := 0; i < r.cluster.N(); i++ {
		if _, prepared, err := r.digests(ctx, i); err != nil {
			r.problem("node %d: reading its PostgreSQL: %v", i+1, err)
		} else if prepared != 0 {
			r.problem("node %d: %d prepared transactions left: %s", i+1, prepared, r.preparedGids(ctx, i))
		}
	}
}

// state describes every node for a failure message.
func (r *run) state(ctx context.Context) string {
	var b strings.Builder
	for i := 0; i < r.cluster.N(); i++ {
		s, prepared, err := r.digests(ctx, i)
		fmt.Fprintf(&b, "node %d (exited: %v): prepared %d %s, err %v\n", i+1, r.cluster.Exited(i), prepared, r.preparedGids(ctx, i), err)
		for _, line := range strings.Split(s, "\n") {
			if len(line) > 300 {
				line = line[:300] + "…"
			}
			fmt.Fprintf(&b, "    %s\n", line)
		}
		fmt.Fprintf(&b, "  log tail:\n    %s\n", strings.ReplaceAll(proccluster.Tail(r.cluster.LogFile(i), 12), "\n", "\n    "))
	}
	return b.String()
}

type nodeMutex = sync.Mutex

func tailOf(r *run, i int) string {
	return proccluster.Tail(r.cluster.LogFile(i), 6)
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n        ") }

// preparedGids lists node i's prepared transactions.
func (r *run) preparedGids(ctx context.Context, i int) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := pgx.Connect(ctx, r.cluster.PGDSN(i))
	if err != nil {
		return ""
	}
	defer d.Close(ctx)
	var gids string
	_ = d.QueryRow(ctx, "SELECT coalesce(string_agg(gid || ' (prepared ' || prepared::text || ')', ', '), '') FROM pg_prepared_xacts").Scan(&gids)
	return gids
}

// failed reports whether the run found a problem.
func (r *run) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.problems) > 0
}

// knownBugs names, among the problems, the signatures of Ordo bugs this
// suite found before (fixed since: seeing one again is a regression),
// found in the nodes' logs, so a failure says what it is.
func (r *run) knownBugs() {
	if !r.failed() {
		return
	}
	for i := 0; i < r.cluster.N(); i++ {
		if old := r.oldPrepared(i); old != "" {
			r.problem("REGRESSION of a fixed bug (issue 14, item 3: prepared transactions nobody owns were not resolved while the node ran): node %d (exited: %v) has held %s for over 30 s", i+1, r.cluster.Exited(i), old)
		}
		b, _ := os.ReadFile(r.cluster.LogFile(i))
		log := string(b)
		if strings.Contains(log, "too many failed attempts") && strings.Contains(log, `"blockers":" prepared: `) {
			r.problem("REGRESSION of a fixed bug (issue 14, item 3: a prepared transaction nobody owned blocked the replay): node %d's apply was blocked by a leftover prepared transaction of its own until it gave up (\"too many failed attempts\") and stopped; see cluster/node%d.log", i+1, i+1)
		}
	}
}

// failureEvidence, after a run with problems, keeps what tells a stall
// from a wrong answer: each node's PostgreSQL sessions that are not idle,
// the locks they wait for and its prepared transactions
// (cluster/nodeN.pg.txt), then each ordo process's goroutines, written to
// its log by the Go runtime as SIGQUIT ends it.
func (r *run) failureEvidence() {
	if !r.failed() {
		return
	}
	for i := 0; i < r.cluster.N(); i++ {
		file := strings.TrimSuffix(r.cluster.LogFile(i), ".log") + ".pg.txt"
		_ = os.WriteFile(file, []byte(r.pgState(i)), 0o644)
	}
	for i := 0; i < r.cluster.N(); i++ {
		if r.cluster.DumpStacks(i, 10*time.Second) {
			r.note("node %d's goroutines are in cluster/node%d.log (SIGQUIT), its PostgreSQL's sessions in cluster/node%d.pg.txt", i+1, i+1, i+1)
		}
	}
}

// pgState is node i's PostgreSQL as failureEvidence keeps it.
func (r *run) pgState(i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := pgx.Connect(ctx, r.cluster.PGDSN(i))
	if err != nil {
		return fmt.Sprintf("connect: %v\n", err)
	}
	defer d.Close(ctx)
	var b strings.Builder
	for _, q := range []struct{ title, sql string }{
		{"sessions not idle", `SELECT pid, application_name, state, wait_event_type, wait_event, now() - xact_start, now() - state_change, left(query, 300)
			FROM pg_stat_activity WHERE state IS DISTINCT FROM 'idle' AND pid <> pg_backend_pid() ORDER BY pid`},
		{"locks waited for", `SELECT l.pid, l.locktype, l.mode, l.relation::regclass, l.transactionid, l.virtualtransaction, pg_blocking_pids(l.pid)
			FROM pg_locks l WHERE NOT l.granted ORDER BY l.pid`},
		{"prepared transactions", `SELECT gid, prepared, transaction FROM pg_prepared_xacts ORDER BY prepared`},
	} {
		fmt.Fprintf(&b, "== %s\n", q.title)
		rows, err := d.Query(ctx, q.sql)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			continue
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
				break
			}
			fmt.Fprintln(&b, vals...)
		}
		if err := rows.Err(); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		rows.Close()
	}
	return b.String()
}

// oldPrepared lists node i's prepared transactions older than 30 s.
func (r *run) oldPrepared(i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := pgx.Connect(ctx, r.cluster.PGDSN(i))
	if err != nil {
		return ""
	}
	defer d.Close(ctx)
	var gids string
	_ = d.QueryRow(ctx, `SELECT coalesce(string_agg(gid || ' (prepared ' || prepared::text || ')', ', '), '')
		FROM pg_prepared_xacts WHERE prepared < now() - interval '30 seconds'`).Scan(&gids)
	return gids
}
