// Command sysbench is `make bench-sysbench`: sysbench's oltp_read_write
// against one PostgreSQL server directly and against a 3-node Ordo
// cluster (clients spread over the nodes), at 1 and 8 threads, in
// interleaved runs (direct, then each protocol, round after round),
// medians. Every server runs with fsync on and the same postgresql.conf
// (internal/pglocal), the Raft logs are on disk, and every server gets
// the same tables from `sysbench prepare` with a fixed seed before the
// nodes start.
//
// A transaction that fails (a serialization failure, 40001, or a
// deadlock) is retried by sysbench and counted as an ignored error; the
// throughput counts committed transactions only.
//
// Beside them (-pgbouncer, on by default), the same runs through
// PgBouncer in session mode in front of the direct server: what a proxy
// alone, replicating nothing, costs sysbench on this machine, the
// ceiling for any cluster a proxy fronts.
//
// For each run it also reads the CPU time of this process (the three
// nodes, which run in it) and of every PostgreSQL process, per committed
// transaction, and it prints the nodes' commit-stage means (probe,
// prepare, capture, terminate) so the next person starts from where the
// time goes. The last line is machine-readable, for dbsm-si:
//
//	RESULT ratio_1=<cluster TPS / direct TPS, 1 thread> ratio_8=<…, 8 threads> cpu_ms_per_txn=<one node's CPU per committed transaction at 8 threads> [pgbouncer_ratio_1=<PgBouncer TPS / direct TPS, 1 thread> pgbouncer_ratio_8=<…>]
//
// (cpu_ms_per_txn is this process's CPU divided by three: the nodes run
// in one process, so it is the mean over the nodes). dbsm's figures are
// printed beside it. Not part of `go test`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

var (
	runs      = flag.Int("runs", 3, "interleaved rounds (medians are reported)")
	duration  = flag.Duration("duration", 20*time.Second, "length of one run")
	warmup    = flag.Duration("warmup", 5*time.Second, "a run of this length against each target before the rounds (not counted)")
	threadsF  = flag.String("threads", "1,8", "thread counts to measure (comma-separated)")
	tables    = flag.Int("tables", 4, "sysbench --tables")
	tableSize = flag.Int("table-size", 20000, "sysbench --table-size")
	protos    = flag.String("protocols", "dbsm-si,dbsm", "protocols to measure (comma-separated)")
	cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of the nodes (all in this process) to this file, over every cluster run")
	metricsP  = flag.Int("metrics-port", 19300, "node i of protocol p serves /metrics on this port + 10·p + i - 1 (read for the commit stages)")
	verbose   = flag.Bool("v", false, "print sysbench's own report of every run")
	bouncer   = flag.Bool("pgbouncer", true, "also measure PgBouncer (session mode) in front of the direct server: the target \"pgbouncer\"")
	socket    = flag.Bool("socket", false, "also measure the first protocol with the nodes connected to PostgreSQL through its Unix-domain socket instead of loopback TCP (the target \"<protocol>/socket\")")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sysbench:", err)
		os.Exit(1)
	}
}

// target is what one run measures: sysbench processes against addrs,
// threads spread over them.
type target struct {
	name    string
	addrs   []string          // host:port of each node (or of the one server)
	metrics []string          // each node's /metrics address (none for direct)
	servers []*pglocal.Server // the PostgreSQL servers whose CPU is read
}

// sample is one run's figures.
type sample struct {
	tps, p95ms, ignored float64
	// CPU per committed transaction, in ms: this process, the target's
	// PostgreSQL servers, and theirs by role (benchcluster.Roles).
	selfCPU, pgCPU float64
	pgRoles        map[string]float64
	// This process's read and write system calls per committed
	// transaction (the nodes': sockets, the Raft log).
	selfReads, selfWrites float64
	// steal: the share of the machine's time the hypervisor gave other
	// guests during the run (0–1).
	steal float64
}

func run() error {
	ctx := context.Background()
	sb, err := exec.LookPath("sysbench")
	if err != nil {
		return fmt.Errorf("sysbench not found (apt-get install sysbench, or run make bench-sysbench): %w", err)
	}
	var threads []int
	for _, s := range strings.Split(*threadsF, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-threads: %q is not a thread count", s)
		}
		threads = append(threads, n)
	}
	direct, err := pglocal.Start(ctx, pglocal.Options{N: 1, Fsync: true})
	if err != nil {
		return err
	}
	defer direct.Stop()
	prepare := func(addr string) error { return sysbench(sb, addr, "prepare", 1, 0, nil) }
	if err := prepare(direct.Servers[0].Addr()); err != nil {
		return err
	}
	targets := []target{{name: "direct", addrs: []string{direct.Servers[0].Addr()}, servers: direct.Servers}}
	if *bouncer {
		most := 0
		for _, n := range threads {
			most = max(most, n)
		}
		port, _, stop, err := benchcluster.StartPgBouncer(direct.Servers[0], most+10)
		if err != nil {
			return fmt.Errorf("%w (or run with -pgbouncer=false)", err)
		}
		defer stop()
		targets = append(targets, target{name: "pgbouncer", addrs: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, servers: direct.Servers})
	}
	names := strings.Split(*protos, ",")
	if *socket {
		names = append(names, names[0]+"/socket")
	}
	for p, name := range names {
		protocol, viaSocket := strings.CutSuffix(name, "/socket")
		c, err := benchcluster.Start(ctx, benchcluster.Options{Protocol: protocol, Socket: viaSocket, MetricsPort: *metricsP + 10*p,
			Load: func(dsn string) error {
				u, err := pgAddr(dsn)
				if err != nil {
					return err
				}
				return prepare(u)
			}})
		if err != nil {
			return err
		}
		defer c.Stop()
		t := target{name: name, servers: c.PG()}
		for i, dsn := range c.DSNs {
			a, err := pgAddr(dsn)
			if err != nil {
				return err
			}
			t.addrs = append(t.addrs, a)
			t.metrics = append(t.metrics, fmt.Sprintf("127.0.0.1:%d", *metricsP+10*p+i))
		}
		targets = append(targets, t)
	}
	fmt.Printf("sysbench oltp_read_write, %d tables of %d rows, %d rounds of %s, fsync on\n", *tables, *tableSize, *runs, *duration)
	for _, t := range targets {
		for _, n := range threads {
			if _, err := measure(sb, t, n, *warmup); err != nil {
				return fmt.Errorf("warm-up of %s: %w", t.name, err)
			}
		}
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	samples := map[string][]sample{}
	moved := map[string]map[string]benchcluster.Histogram{} // by target/threads, over the rounds
	for r := 0; r < *runs; r++ {
		for _, n := range threads {
			for _, t := range targets {
				before := benchcluster.ReadHistograms(t.metrics)
				s, err := measure(sb, t, n, *duration)
				if err != nil {
					return fmt.Errorf("%s at %d threads: %w", t.name, n, err)
				}
				key := fmt.Sprintf("%s/%d", t.name, n)
				moved[key] = benchcluster.Moved(moved[key], before, benchcluster.ReadHistograms(t.metrics))
				samples[key] = append(samples[key], s)
				fmt.Printf("round %d  %-12s threads=%d tps=%7.1f p95=%6.2fms retried=%5.1f/s  cpu/txn: ordo %.3fms (%.0f reads, %.0f writes) postgres %.3fms (%s)  stolen %.1f%%\n",
					r+1, t.name, n, s.tps, s.p95ms, s.ignored, s.selfCPU, s.selfReads, s.selfWrites, s.pgCPU, benchcluster.FormatRoles(s.pgRoles), 100*s.steal)
			}
		}
	}
	fmt.Println()
	fmt.Println("medians:")
	med := map[string]sample{}
	for _, n := range threads {
		for _, t := range targets {
			key := fmt.Sprintf("%s/%d", t.name, n)
			m := medianSample(samples[key])
			med[key] = m
			line := fmt.Sprintf("  %-12s threads=%d tps=%7.1f p95=%6.2fms", t.name, n, m.tps, m.p95ms)
			if t.name == "pgbouncer" {
				line += fmt.Sprintf("  ratio=%.3f  postgres %.3fms (direct: %.3fms)", m.tps/med[fmt.Sprintf("direct/%d", n)].tps, m.pgCPU, med[fmt.Sprintf("direct/%d", n)].pgCPU)
			} else if t.name != "direct" {
				line += fmt.Sprintf("  ratio=%.3f  cpu/txn per node %.3fms (system calls of the three: %.0f reads, %.0f writes), postgres (all servers) %.3fms: %s (direct: %.3fms)",
					m.tps/med[fmt.Sprintf("direct/%d", n)].tps, m.selfCPU/3, m.selfReads, m.selfWrites, m.pgCPU, benchcluster.FormatRoles(m.pgRoles), med[fmt.Sprintf("direct/%d", n)].pgCPU)
			}
			fmt.Println(line)
		}
	}
	fmt.Println()
	fmt.Println("where a commit's time goes (means over the rounds, all nodes; ms):")
	for _, n := range threads {
		for _, t := range targets[1:] {
			if len(t.metrics) == 0 {
				continue // (PgBouncer)
			}
			fmt.Printf("  %-12s threads=%d  %s\n", t.name, n, benchcluster.Breakdown(nil, moved[fmt.Sprintf("%s/%d", t.name, n)]))
		}
	}
	si1, ok1 := med["dbsm-si/1"]
	si8, ok8 := med["dbsm-si/8"]
	d1, d8 := med["direct/1"], med["direct/8"]
	if !ok1 || !ok8 || d1.tps == 0 || d8.tps == 0 {
		return nil // a partial run prints no RESULT line
	}
	fmt.Printf("\ntargets: ratio >= 0.60 at 1 thread, >= 0.45 at 8 threads (dbsm-si)\n")
	bouncers := ""
	if b1, ok := med["pgbouncer/1"]; ok {
		bouncers = fmt.Sprintf(" pgbouncer_ratio_1=%.3f pgbouncer_ratio_8=%.3f", b1.tps/d1.tps, med["pgbouncer/8"].tps/d8.tps)
	}
	fmt.Printf("RESULT ratio_1=%.3f ratio_8=%.3f cpu_ms_per_txn=%.3f%s\n", si1.tps/d1.tps, si8.tps/d8.tps, si8.selfCPU/3, bouncers)
	return nil
}

// pgAddr returns the host:port of a postgres:// URL.
func pgAddr(dsn string) (string, error) {
	m := regexp.MustCompile(`@([^/]+)/`).FindStringSubmatch(dsn)
	if m == nil {
		return "", fmt.Errorf("no address in %q", dsn)
	}
	if _, _, err := net.SplitHostPort(m[1]); err != nil {
		return "", err
	}
	return m[1], nil
}

// sysbench runs one sysbench command against addr.
func sysbench(sb, addr, command string, threads int, d time.Duration, out io.Writer) error {
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"oltp_read_write", "--db-driver=pgsql", "--pgsql-host=" + host, "--pgsql-port=" + port,
		"--pgsql-user=" + pglocal.Superuser, "--pgsql-password=ordo", "--pgsql-db=postgres",
		"--tables=" + strconv.Itoa(*tables), "--table-size=" + strconv.Itoa(*tableSize),
		"--threads=" + strconv.Itoa(threads), "--rand-seed=1", "--percentile=95"}
	if command == "run" {
		args = append(args, "--time="+strconv.Itoa(int(d.Seconds())), "--report-interval=0")
	}
	args = append(args, command)
	cmd := exec.Command(sb, args...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("sysbench %s against %s: %v\n%s", command, addr, err, b)
	}
	if out != nil {
		out.Write(b)
	}
	return nil
}

// measure runs sysbench for d with threads spread over t's addresses and
// sums what they report.
func measure(sb string, t target, threads int, d time.Duration) (sample, error) {
	addrs := t.addrs
	if threads < len(addrs) {
		addrs = addrs[:threads]
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		s    sample
		txns float64
		errs []error
	)
	cpu, host := benchcluster.StartCPU(context.Background(), t.servers), benchcluster.SampleHost()
	for i, a := range addrs {
		n := threads / len(addrs)
		if i < threads%len(addrs) {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out strings.Builder
			err := sysbench(sb, a, "run", n, d, &out)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if *verbose {
				fmt.Fprintln(os.Stderr, out.String())
			}
			r, err := parseRun(out.String())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a, err))
				return
			}
			s.tps += r.tps
			s.ignored += r.ignored
			s.p95ms = max(s.p95ms, r.p95ms)
			txns += r.txns
		}()
	}
	wg.Wait()
	used := cpu.Stop()
	_, s.steal = host.Until(benchcluster.SampleHost())
	if len(errs) > 0 {
		return sample{}, errs[0]
	}
	if txns > 0 {
		s.selfCPU = used.Self.Seconds() * 1000 / txns
		s.selfReads, s.selfWrites = float64(used.SelfReads)/txns, float64(used.SelfWrites)/txns
		s.pgCPU, s.pgRoles = used.PerTxn(txns)
	}
	return s, nil
}

type report struct{ txns, tps, ignored, p95ms float64 }

var (
	reTxns    = regexp.MustCompile(`transactions:\s+(\d+)\s+\(([0-9.]+) per sec`)
	reIgnored = regexp.MustCompile(`ignored errors:\s+\d+\s+\(([0-9.]+) per sec`)
	reP95     = regexp.MustCompile(`95th percentile:\s+([0-9.]+)`)
)

func parseRun(out string) (report, error) {
	var r report
	m := reTxns.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("sysbench printed no transaction count:\n%s", out)
	}
	r.txns, _ = strconv.ParseFloat(m[1], 64)
	r.tps, _ = strconv.ParseFloat(m[2], 64)
	if m := reIgnored.FindStringSubmatch(out); m != nil {
		r.ignored, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reP95.FindStringSubmatch(out); m != nil {
		r.p95ms, _ = strconv.ParseFloat(m[1], 64)
	}
	return r, nil
}

func medianSample(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return sample{
		tps:        pick(func(s sample) float64 { return s.tps }),
		p95ms:      pick(func(s sample) float64 { return s.p95ms }),
		ignored:    pick(func(s sample) float64 { return s.ignored }),
		selfCPU:    pick(func(s sample) float64 { return s.selfCPU }),
		pgCPU:      pick(func(s sample) float64 { return s.pgCPU }),
		pgRoles:    benchcluster.MedianRoles(rolesOf(ss)),
		selfReads:  pick(func(s sample) float64 { return s.selfReads }),
		selfWrites: pick(func(s sample) float64 { return s.selfWrites }),
	}
}

// rolesOf lists the samples' PostgreSQL CPU by role.
func rolesOf(ss []sample) []map[string]float64 {
	out := make([]map[string]float64, len(ss))
	for i, s := range ss {
		out[i] = s.pgRoles
	}
	return out
}
