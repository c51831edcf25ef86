package proccluster

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/internal/testport"
	"github.com/ordo-db/ordo/internal/totalorder/storage"
)

// Options configures Start.
type Options struct {
	// N is the number of nodes (default 3).
	N int
	// Protocol is every node's protocol (dbsm, dbsm-si, …).
	Protocol string
	// Dir holds the nodes' configurations, data directories and logs
	// (node1.yaml, node1/, node1.log, …). Required.
	Dir string
	// Bin is the ordo binary; empty means Build into Dir.
	Bin string
	// Extra lines are appended to every node's configuration, with @ID@
	// replaced by the node's id.
	Extra []string
	// StartTimeout bounds each process start (default 60s).
	StartTimeout time.Duration
	// Database is the replicated database (default "postgres"); Prepare
	// must create it if it is another.
	Database string
	// Prepare, if set, runs once the PostgreSQL servers are up and before
	// any node starts (to create roles and databases on every server).
	Prepare func(ctx context.Context, pg *pglocal.Cluster) error
	// Witness adds a witness ('ordo witness', no PostgreSQL) as node
	// N+1, its process index N: every node's witnesses: lists it. N() and
	// the methods of data nodes still count only the N data nodes; Kill,
	// Start, Exited, Isolate and the links take index N for the witness.
	Witness bool
	// SlowPGSync runs the PostgreSQL servers with fsync on and with
	// slowfsync.c preloaded, so SlowPGSync can slow their fsyncs.
	SlowPGSync bool
}

// Cluster is a running set of `ordo start` processes, each in front of its
// own PostgreSQL server.
type Cluster struct {
	PG  *pglocal.Cluster
	Dir string
	// Database is the replicated database (Options.Database).
	Database string

	bin     string
	timeout time.Duration
	listen  []string
	peer    []string
	metrics []string
	links   map[[2]int]*Link // [from, to] (0-based)

	mu    sync.Mutex
	procs []*exec.Cmd

	pgMu sync.Mutex // serializes KillPG, RestartPG and PGRunning

	faultDir string // slowfsync.so and the servers' delay files (SlowPGSync)
	witness  int    // the witness's index (Options.Witness), -1 without one
}

// Build compiles cmd/ordo into dir and returns the binary's path. It must
// run inside the module's tree.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "ordo")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ordo-db/ordo/cmd/ordo").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("proccluster: go build: %w: %s", err, out)
	}
	return bin, nil
}

// Start starts o.N PostgreSQL servers and one `ordo start` process in front
// of each, and returns once every node serves PostgreSQL clients. On error
// everything already started is stopped.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.N <= 0 {
		o.N = 3
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.Dir == "" {
		return nil, errors.New("proccluster: Options.Dir required")
	}
	if o.Database == "" {
		o.Database = "postgres"
	}
	if o.Bin == "" {
		if o.Bin, err = Build(o.Dir); err != nil {
			return nil, err
		}
	}
	pgo := pglocal.Options{N: o.N}
	var faultDir string
	if o.SlowPGSync {
		if faultDir, err = buildSlowFsync(); err != nil {
			return nil, err
		}
		pgo.Fsync = true
		pgo.Env = []string{"LD_PRELOAD=" + filepath.Join(faultDir, "slowfsync.so"), "ORDO_FAULT_FSYNC_DELAY_FILE=" + filepath.Join(faultDir, "@NAME@.delay")}
	}
	pg, err := pglocal.Start(ctx, pgo)
	if err != nil {
		if faultDir != "" {
			os.RemoveAll(faultDir)
		}
		return nil, fmt.Errorf("proccluster: %w", err)
	}
	started := &Cluster{PG: pg, Dir: o.Dir, Database: o.Database, bin: o.Bin, timeout: o.StartTimeout, links: map[[2]int]*Link{}, faultDir: faultDir, witness: -1}
	c = started
	defer func() {
		if err != nil {
			// (started, not c: a `return nil, err` has set c to nil,
			// and its Stop panicked, hiding err: the safety matrix,
			// 2026-12-02.)
			started.Stop()
			c = nil
		}
	}()
	if o.Prepare != nil {
		if err := o.Prepare(ctx, pg); err != nil {
			return nil, fmt.Errorf("proccluster: prepare: %w", err)
		}
	}
	// Hold every node's ports until the links have theirs, so no link
	// takes a port a node is about to bind.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	total := o.N
	if o.Witness {
		total++
		c.witness = o.N
	}
	c.procs = make([]*exec.Cmd, total)
	for i := 0; i < total; i++ {
		for _, list := range []*[]string{&c.listen, &c.peer, &c.metrics} {
			l, err := testport.Listen()
			if err != nil {
				return nil, err
			}
			held = append(held, l)
			*list = append(*list, l.Addr().String())
		}
	}
	for i := 0; i < total; i++ {
		for j := 0; j < total; j++ {
			if i == j {
				continue
			}
			l, err := NewLink(c.peer[j])
			if err != nil {
				return nil, err
			}
			c.links[[2]int{i, j}] = l
		}
	}
	for i := 0; i < total; i++ {
		var b strings.Builder
		if i == c.witness {
			fmt.Fprintf(&b, "id: %d\npeer_listen: %s\nmetrics_listen: %s\ndata_dir: %s\npropose_timeout: 3s\npeers:\n",
				i+1, c.peer[i], c.metrics[i], filepath.Join(c.Dir, fmt.Sprint("node", i+1)))
		} else {
			fmt.Fprintf(&b, "id: %d\nlisten: %s\npeer_listen: %s\nmetrics_listen: %s\npostgres: %s\ndata_dir: %s\nprotocol: %s\npropose_timeout: 3s\ncommit_timeout: 20s\npeers:\n",
				i+1, c.listen[i], c.peer[i], c.metrics[i], pg.Servers[i].DSN(o.Database), filepath.Join(c.Dir, fmt.Sprint("node", i+1)), o.Protocol)
		}
		for j := 0; j < total; j++ {
			addr := c.peer[j]
			if j != i {
				addr = c.links[[2]int{i, j}].Addr()
			}
			fmt.Fprintf(&b, "  %d: %s\n", j+1, addr)
		}
		if o.Witness {
			fmt.Fprintf(&b, "witnesses: [%d]\n", c.witness+1)
		}
		for _, line := range o.Extra {
			b.WriteString(strings.ReplaceAll(line, "@ID@", fmt.Sprint(i+1)) + "\n")
		}
		if err := os.WriteFile(c.config(i), []byte(b.String()), 0o600); err != nil {
			return nil, err
		}
	}
	for _, l := range held {
		l.Close()
	}
	held = nil
	// Start every node at once: a node waits for a quorum before serving.
	errs := make([]error, total)
	var wg sync.WaitGroup
	for i := 0; i < total; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Start(i)
		}()
	}
	wg.Wait()
	return c, errors.Join(errs...)
}

// N is the number of data nodes (the witness, if any, not counted).
func (c *Cluster) N() int { return len(c.PG.Servers) }

// Witness is the witness's process index, -1 without one.
func (c *Cluster) Witness() int { return c.witness }

func (c *Cluster) config(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("node%d.yaml", i+1))
}

// syncDelayFile holds the delay node i's process adds to each fsync of its
// Raft log (SlowSync).
func (c *Cluster) syncDelayFile(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("node%d.syncdelay", i+1))
}

// tellStallFile stops node i's delivery loop after it tells a commit
// while it exists (StallAfterTell).
func (c *Cluster) tellStallFile(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("node%d.tellstall", i+1))
}

// StallAfterTell makes node i's delivery loop, in the running process and
// those started after, stop right after it tells a session of its commit
// and before that commit's COMMIT PREPARED (on), or carry on (off):
// replica.FaultTellStallEnv.
func (c *Cluster) StallAfterTell(i int, on bool) error {
	if !on {
		err := os.Remove(c.tellStallFile(i))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.WriteFile(c.tellStallFile(i), nil, 0o644)
}

// SlowSync makes every fsync of node i's Raft log take d longer (0: back
// to normal), within 100 ms, in the running process and those started
// after.
func (c *Cluster) SlowSync(i int, d time.Duration) error {
	return os.WriteFile(c.syncDelayFile(i), []byte(d.String()+"\n"), 0o644)
}

//go:embed preload/slowfsync.c
var slowFsyncC []byte

// buildSlowFsync compiles slowfsync.c into a directory the servers' user
// can read, and returns the directory.
func buildSlowFsync() (string, error) {
	dir, err := os.MkdirTemp("", "ordo-slowfsync-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	src := filepath.Join(dir, "slowfsync.c")
	if err := os.WriteFile(src, slowFsyncC, 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-o", filepath.Join(dir, "slowfsync.so"), src, "-ldl").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("proccluster: compile slowfsync.c (a C compiler is needed for SlowPGSync): %w: %s", err, out)
	}
	return dir, nil
}

// SlowPGSync makes every fsync and fdatasync of node i's PostgreSQL
// server take d longer (0: back to normal), within 100 ms (a cluster
// started with SlowPGSync).
func (c *Cluster) SlowPGSync(i int, d time.Duration) error {
	if c.faultDir == "" {
		return errors.New("proccluster: the cluster was not started with SlowPGSync")
	}
	return os.WriteFile(filepath.Join(c.faultDir, c.PG.Servers[i].Name+".delay"), []byte(fmt.Sprintf("%d\n", d.Microseconds())), 0o644)
}

// LogFile is node i's log (appended to by every start).
func (c *Cluster) LogFile(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("node%d.log", i+1))
}

// Start starts node i's process (0-based) and waits until it serves
// PostgreSQL clients. Its log is appended to LogFile(i).
func (c *Cluster) Start(i int) error {
	verb, ready := "start", "serving PostgreSQL clients"
	if i == c.witness {
		verb, ready = "witness", "voting on"
	}
	cmd := exec.Command(c.bin, verb, "--config", c.config(i), "--log-level", "info")
	cmd.Env = append(os.Environ(), storage.FaultSyncDelayEnv+"="+c.syncDelayFile(i), replica.FaultTellStallEnv+"="+c.tellStallFile(i))
	// Killed with the process that started it: a test that dies leaves no
	// node behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(c.LogFile(i), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== proccluster: start at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	logf.Close() // the child holds its own descriptor
	c.mu.Lock()
	c.procs[i] = cmd
	c.mu.Unlock()
	readyc := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ready) {
				close(readyc)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	deadline := time.After(c.timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-readyc:
			return nil
		case <-tick.C:
			if c.Exited(i) {
				return fmt.Errorf("proccluster: node %d exited while starting:\n%s", i+1, Tail(c.LogFile(i), 30))
			}
		case <-deadline:
			return fmt.Errorf("proccluster: node %d did not serve within %s:\n%s", i+1, c.timeout, Tail(c.LogFile(i), 30))
		}
	}
}

// Kill sends SIGKILL to node i's process (if running) and reaps it. A
// paused (SIGSTOPped) process is killed as well: SIGKILL ends a stopped
// process, and the SIGCONT sent after it is harmless either way.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p != nil && p.Process != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Process.Signal(syscall.SIGCONT)
		_ = p.Wait()
	}
}

// DumpStacks ends node i's process (if running) with SIGQUIT, on which
// the Go runtime writes every goroutine's stack to LogFile(i) before it
// exits, and reaps it; it reports whether the process was running and
// exited within wait (a paused one is resumed first). For evidence of a
// stall: the node does not run after it.
func (c *Cluster) DumpStacks(i int, wait time.Duration) bool {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p == nil || p.Process == nil {
		return false
	}
	_ = p.Process.Signal(syscall.SIGQUIT)
	_ = p.Process.Signal(syscall.SIGCONT)
	exited := make(chan struct{})
	go func() {
		_ = p.Wait()
		close(exited)
	}()
	select {
	case <-exited:
		return true
	case <-time.After(wait):
		_ = p.Process.Signal(syscall.SIGKILL)
		<-exited
		return false
	}
}

// Pause stops node i's process with SIGSTOP: it keeps its sockets, its
// PostgreSQL sessions and its memory but runs nothing until Resume (peers
// and clients see it hang, not close). A paused process is not Exited.
func (c *Cluster) Pause(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[i]
	if p == nil || p.Process == nil {
		return fmt.Errorf("proccluster: node %d is not running", i+1)
	}
	// Under c.mu: Kill clears procs[i] before it reaps, so the pid is
	// still this process (running or a zombie), never a reused one.
	return p.Process.Signal(syscall.SIGSTOP)
}

// Resume sends SIGCONT to node i's process (if any): it ends a Pause and
// is harmless to a process that is not paused.
func (c *Cluster) Resume(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[i]; p != nil && p.Process != nil {
		_ = p.Process.Signal(syscall.SIGCONT)
	}
}

// KillPG crashes node i's PostgreSQL server: SIGKILL to its postmaster and
// every process it started (pglocal.Server.Kill), returning once they are
// gone. The ordo process is left alone. RestartPG brings the server back.
func (c *Cluster) KillPG(i int) {
	c.pgMu.Lock()
	defer c.pgMu.Unlock()
	c.PG.Servers[i].Kill()
}

// RestartPG starts node i's PostgreSQL server again (on the same port and
// data directory, through crash recovery) if it is not running, and waits
// until it accepts connections.
func (c *Cluster) RestartPG(ctx context.Context, i int) error {
	c.pgMu.Lock()
	defer c.pgMu.Unlock()
	s := c.PG.Servers[i]
	if s.Running() {
		return nil
	}
	if err := s.Restart(ctx); err != nil {
		return fmt.Errorf("proccluster: node %d's PostgreSQL: %w", i+1, err)
	}
	return nil
}

// PGRunning reports whether node i's PostgreSQL postmaster is running.
func (c *Cluster) PGRunning(i int) bool {
	c.pgMu.Lock()
	defer c.pgMu.Unlock()
	return c.PG.Servers[i].Running()
}

// Exited reports whether node i's process is not running: never started,
// killed, or exited on its own (a zombie until Kill reaps it).
func (c *Cluster) Exited(i int) bool {
	c.mu.Lock()
	p := c.procs[i]
	c.mu.Unlock()
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

// Stop kills every process, closes every link and stops PostgreSQL.
func (c *Cluster) Stop() {
	for i := range c.procs {
		c.Kill(i)
	}
	for _, l := range c.links {
		l.Close()
	}
	if c.PG != nil {
		_ = c.PG.Stop()
	}
	if c.faultDir != "" {
		os.RemoveAll(c.faultDir)
	}
}

// DSN is the connection URL of node i's Ordo port.
func (c *Cluster) DSN(i int) string {
	return fmt.Sprintf("postgres://ordo:ordo@%s/%s?sslmode=disable&connect_timeout=5", c.listen[i], c.Database)
}

// Addr is node i's client address (host:port).
func (c *Cluster) Addr(i int) string { return c.listen[i] }

// PGDSN is the connection URL of node i's own PostgreSQL server.
func (c *Cluster) PGDSN(i int) string {
	return c.PG.Servers[i].DSN(c.Database) + "&connect_timeout=5"
}

// Metric reads one unlabelled sample from node i's /metrics.
func (c *Cluster) Metric(i int, name string) (float64, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + c.metrics[i] + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("proccluster: node %d exports no %s", i+1, name)
}

// Leader returns the node (0-based) that is the Raft leader by the nodes'
// /metrics (ordo_totalorder_is_leader, ordo_totalorder_term), with its
// term, or -1 when none says so (an election under way, or every node that
// claims it unreachable).
func (c *Cluster) Leader() (leader int, term float64) {
	states := make([]leaderState, c.N())
	for i := range states {
		is, err := c.Metric(i, "ordo_totalorder_is_leader")
		if err != nil {
			continue
		}
		t, err := c.Metric(i, "ordo_totalorder_term")
		if err != nil {
			continue
		}
		states[i] = leaderState{ok: true, isLeader: is == 1, term: t}
	}
	return leaderOf(states)
}

// leaderState is what one node's /metrics says about the leadership.
type leaderState struct {
	ok       bool // the node answered
	isLeader bool
	term     float64
}

// leaderOf picks, among the nodes that answered and say they lead, the one
// of the highest term: a leader cut off from a quorum may still say so for
// an election timeout after a newer one was elected. A tie (which Raft
// rules out within one term) goes to the lowest node. -1: nobody leads.
func leaderOf(states []leaderState) (leader int, term float64) {
	leader = -1
	for i, s := range states {
		if s.ok && s.isLeader && (leader < 0 || s.term > term) {
			leader, term = i, s.term
		}
	}
	return leader, term
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
