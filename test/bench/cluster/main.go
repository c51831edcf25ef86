// Command cluster is `make bench-cluster`: pgbench TPC-B-like against one
// PostgreSQL directly and against a 3-node Ordo cluster (clients spread over
// the nodes), for dbsm and dbsm-si, 1 client (latency) and 8 clients
// (throughput), several runs, medians. It prints the ratios and ends with
//
//	RESULT tps_ratio_dbsm_si=<n> tps_ratio_dbsm=<n> added_p50_ms=<n> node_cpu_ms_per_txn=<n>
//
// where the TPS ratios are at 8 clients and added_p50_ms is the p50 latency
// at 1 client through the cluster (dbsm-si) minus direct, and
// node_cpu_ms_per_txn the CPU time of this process (the three nodes run in
// it) per committed transaction at 8 clients (dbsm-si), divided by three:
// one node's mean. Every run also prints the CPU of all PostgreSQL
// processes per committed transaction, beside direct's. Serialization
// failures are retried by pgbench (--max-tries), as an application would.
// Every server gets the same initial data from pgbench -i before the
// cluster starts.
//
// At 1 client it also prints each statement's mean latency (pgbench -r)
// directly and through node 1, and what the cluster adds.
//
// With -script update each client runs one autocommit statement instead,
// `UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid`
// for a random row (issue 17's "autocommit single-row update"), and it
// ends with
//
//	RESULT update_added_p50_ms=<n> update_p50_ms_direct=<n> update_p50_ms_cluster=<n>
//
// (at 1 client, dbsm-si, through node 1).
//
// With -load (`make bench-load`) it measures a bulk load instead: pgbench
// -i -s <scale> into one PostgreSQL directly, and through one node of a
// fresh cluster (one transaction of scale × 100,000 rows, replicated as
// fragments), until every node has the data; it ends with
//
//	RESULT load_s_direct=<n> load_s_ordo=<n> load_s_everywhere=<n> load_ratio=<n> peak_rss_mb=<n>
//
// where load_ratio is load_s_everywhere / load_s_direct and peak_rss_mb is
// the peak resident memory of this process (the three nodes).
//
// With -ddl (`make bench-ddl`) it measures schema changes: one client
// creates a table, inserts a row into it and drops it, over and over,
// against one PostgreSQL directly and through node 1 of a dbsm-si
// cluster, in interleaved runs, in a database that already holds
// -ddl-tables tables; it ends with
//
//	RESULT ddl_create_ms_direct=<n> ddl_create_ms_ordo=<n> ddl_insert_ms_direct=<n> ddl_insert_ms_ordo=<n> ddl_drop_ms_direct=<n> ddl_drop_ms_ordo=<n>
//
// (medians over every run).
//
// With -join (`make bench-join`, at -scale 50 there) nodes join the
// 3-node dbsm-si cluster (pgbench's tables at -scale) from node 2, first
// with no client, then while two pgbench clients per node write through
// the original three; each join is compared with pg_dump -Fc | pg_restore
// of node 2's database under the same conditions (-runs times, median),
// and under load node 2's throughput during the copy with the 10 s before
// it. It ends with
//
//	RESULT join_s=<n> baseline_s=<n> ratio=<n> join_load_s=<n> baseline_load_s=<n> ratio_load=<n> voter_load_s=<n> donor_tps_drop_pct=<n>
//
// where join_s is the copy (until the node starts replaying) and
// voter_load_s the time until the node under load is a voter.
//
// With -follow D it measures what leader_follows_writes buys: one pgbench
// client on a node that does not lead a fresh dbsm-si cluster whose links
// between nodes delay every message by D one way, with
// leader_follows_writes off and on, in interleaved runs (each after 15 s
// of the same client, so a leader can move); it ends with
//
//	RESULT follow_off_p50_ms=<n> follow_on_p50_ms=<n> follow_on_moved=<runs where the leader moved to the client's node>
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	runs      = flag.Int("runs", 3, "runs per configuration (medians are reported)")
	duration  = flag.Duration("duration", 10*time.Second, "length of one run")
	scale     = flag.Int("scale", 10, "pgbench scale factor")
	protos    = flag.String("protocols", "dbsm-si,dbsm", "protocols to measure (comma-separated)")
	metrics   = flag.Int("metrics-port", 19400, "node i serves /metrics on this port + i - 1 (read for where a commit's time goes; 0: none)")
	clientsF  = flag.String("clients", "1,8", "client counts to measure (comma-separated)")
	cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of the Ordo nodes (all in this process) during the cluster runs")
	logFile   = flag.String("log", "", "write the nodes' log to this file (for investigation)")
	workers   = flag.Int("apply-workers", 0, "apply_workers of every node (0: the default)")
	verbose   = flag.Bool("v", false, "print pgbench's own report of every run")
	loadMode  = flag.Bool("load", false, "measure pgbench -i through the cluster instead (see the package comment)")
	joinMode  = flag.Bool("join", false, "measure a fourth node joining under load instead (see the package comment)")
	follow    = flag.Duration("follow", 0, "measure 1 client on a node that does not lead, links between nodes delayed by this one-way delay, with leader_follows_writes off and on, instead (see the package comment)")
	ddlMode   = flag.Bool("ddl", false, "measure CREATE TABLE, an insert and DROP TABLE through a node instead (see the package comment)")
	ddlTabs   = flag.Int("ddl-tables", 100, "tables in the database before -ddl starts")
	ddlIters  = flag.Int("ddl-iterations", 30, "create/insert/drop cycles per -ddl run")
	noFlush   = flag.Bool("no-flush", false, "analysis only: every PostgreSQL (direct's too) with fsync off and the Raft logs on /dev/shm, so that no commit waits for a disk's flush (what the commit path costs on a disk whose flushes are nearly free); prints no RESULT line")
	script    = flag.String("script", "tpcb-like", "what each client runs: tpcb-like (pgbench's builtin) or update (one autocommit UPDATE of a random pgbench_accounts row)")
	ddlWriter = flag.Bool("ddl-writer", false, "with -ddl, a second client updates one row meanwhile (through node 2, or the same server directly) and its latencies are reported")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cluster:", err)
		os.Exit(1)
	}
}

type result struct {
	tps   float64
	p50ms float64
	// CPU per committed transaction, in ms (medians over the runs): this
	// process (the three Ordo nodes and the benchmark itself, which only
	// waits for pgbench) and the target's PostgreSQL servers, with
	// theirs by role (benchcluster.Roles).
	ordoCPU, pgCPU float64
	pgRoles        map[string]float64
	// The read and write system calls of this process (the nodes') per
	// committed transaction, medians over the runs.
	ordoReads, ordoWrites float64
	// steal: the largest share of the machine's time the hypervisor gave
	// other guests during a run (0–1).
	steal float64
	// stmts: at 1 client, each statement of the script with its mean
	// latency in ms (pgbench -r; the median over the runs), in order.
	stmts []stmtLatency
}

type stmtLatency struct {
	sql string
	ms  float64
}

// stmtRE matches a line of pgbench -r's report: the mean latency, the
// failures and retries (--max-tries), then the command.
var stmtRE = regexp.MustCompile(`(?m)^\s+([0-9.]+)\s+[0-9]+\s+[0-9]+\s+(\S.*)$`)

// stmtLatencies reads pgbench -r's report of one run.
func stmtLatencies(out []byte) []stmtLatency {
	var st []stmtLatency
	for _, m := range stmtRE.FindAllSubmatch(out, -1) {
		sql := string(m[2])
		if strings.HasPrefix(sql, "\\") { // \set: no round trip
			continue
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		st = append(st, stmtLatency{sql: sql, ms: v})
	}
	return st
}

// printStatements prints, per statement, its mean latency directly and
// through the cluster, and what the cluster adds.
func printStatements(protocol string, direct, cluster result) {
	if len(direct.stmts) == 0 || len(direct.stmts) != len(cluster.stmts) {
		return
	}
	fmt.Printf("         per statement at 1 client (means, ms): direct, %s, added\n", protocol)
	for i, d := range direct.stmts {
		c := cluster.stmts[i]
		sql := d.sql
		if len(sql) > 60 {
			sql = sql[:57] + "..."
		}
		fmt.Printf("           %-60s %7.3f %7.3f %+7.3f\n", sql, d.ms, c.ms, c.ms-d.ms)
	}
}

func run() error {
	ctx := context.Background()
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		return fmt.Errorf("pgbench not found (apt-get install postgresql-client-15): %w", err)
	}
	direct, err := pglocal.Start(ctx, pglocal.Options{N: 1, Fsync: !*noFlush})
	if err != nil {
		return err
	}
	defer direct.Stop()
	if *loadMode {
		return runLoad(ctx, pgbench, direct.Servers[0].DSN("postgres"))
	}
	if *ddlMode {
		return runDDL(ctx, direct.Servers[0].DSN("postgres"))
	}
	if *joinMode {
		return runJoin(ctx, pgbench, direct.Servers[0].DSN("postgres"))
	}
	if *follow > 0 {
		return runFollow(ctx, pgbench)
	}
	if err := initPgbench(pgbench, direct.Servers[0].DSN("postgres")); err != nil {
		return err
	}
	results := map[string]result{}
	var clientCounts []int
	for _, c := range strings.Split(*clientsF, ",") {
		n, err := strconv.Atoi(c)
		if err != nil {
			return fmt.Errorf("-clients: %w", err)
		}
		clientCounts = append(clientCounts, n)
	}
	for _, clients := range clientCounts {
		r, err := measure(pgbench, []string{direct.Servers[0].DSN("postgres")}, direct.Servers, clients)
		if err != nil {
			return err
		}
		results[fmt.Sprintf("direct/%d", clients)] = r
		fmt.Printf("direct   clients=%d tps=%.1f p50=%.3fms  cpu/txn: postgres %.3fms (%s)\n", clients, r.tps, r.p50ms, r.pgCPU, benchcluster.FormatRoles(r.pgRoles))
	}
	for _, protocol := range strings.Split(*protos, ",") {
		// The initial data (a million rows at scale 10, more than one write
		// set may hold) is loaded into every PostgreSQL server before the
		// nodes start; pgbench -i generates identical data everywhere.
		c, err := startBenchCluster(ctx, protocol, func(dsn string) error { return initPgbench(pgbench, dsn) })
		if err != nil {
			return err
		}
		dsns, stop := c.DSNs, c.Stop
		if *cpuprof != "" {
			f, err := os.Create(fmt.Sprintf("%s.%s", *cpuprof, protocol))
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
		}
		for _, clients := range clientCounts {
			targets := dsns
			if clients == 1 {
				targets = dsns[:1]
			}
			var nodes []string
			for i := 0; *metrics != 0 && i < len(dsns); i++ {
				nodes = append(nodes, fmt.Sprintf("127.0.0.1:%d", *metrics+i))
			}
			before := benchcluster.ReadHistograms(nodes)
			r, err := measure(pgbench, targets, c.PG(), clients)
			if err != nil {
				stop()
				return err
			}
			results[fmt.Sprintf("%s/%d", protocol, clients)] = r
			fmt.Printf("%-8s clients=%d tps=%.1f p50=%.3fms  cpu/txn: ordo %.3fms (%.3fms per node; %.0f reads, %.0f writes), postgres %.3fms (%s)  stolen up to %.1f%%\n",
				protocol, clients, r.tps, r.p50ms, r.ordoCPU, r.ordoCPU/3, r.ordoReads, r.ordoWrites, r.pgCPU, benchcluster.FormatRoles(r.pgRoles), 100*r.steal)
			if b := benchcluster.Breakdown(before, benchcluster.ReadHistograms(nodes)); b != "" {
				fmt.Printf("         where a commit's time goes (means, ms): %s\n", b)
			}
			if clients == 1 {
				printStatements(protocol, results["direct/1"], r)
			}
		}
		if *cpuprof != "" {
			pprof.StopCPUProfile()
		}
		stop()
	}
	if *noFlush {
		fmt.Println("\n(-no-flush: fsync off and the Raft logs in memory; figures for analysis, no RESULT line)")
		return nil
	}
	if *script == "update" {
		d, okD := results["direct/1"]
		c, okC := results["dbsm-si/1"]
		if !okD || !okC {
			return nil // a partial run prints no RESULT line
		}
		fmt.Printf("\nadded p50 latency of an autocommit single-row update at 1 client: dbsm-si %.3f ms (target <= 1.0)\n", c.p50ms-d.p50ms)
		fmt.Printf("RESULT update_added_p50_ms=%.3f update_p50_ms_direct=%.3f update_p50_ms_cluster=%.3f\n", c.p50ms-d.p50ms, d.p50ms, c.p50ms)
		return nil
	}
	for _, k := range []string{"direct/1", "direct/8", "dbsm/1", "dbsm/8", "dbsm-si/1", "dbsm-si/8"} {
		if _, ok := results[k]; !ok {
			return nil // a partial run prints no RESULT line
		}
	}
	ratioSI := results["dbsm-si/8"].tps / results["direct/8"].tps
	ratioS := results["dbsm/8"].tps / results["direct/8"].tps
	added := results["dbsm-si/1"].p50ms - results["direct/1"].p50ms
	fmt.Printf("\ncluster/direct TPS at 8 clients: dbsm-si %.2f, dbsm %.2f (target >= 0.3)\n", ratioSI, ratioS)
	fmt.Printf("added p50 latency at 1 client: dbsm-si %.3f ms, dbsm %.3f ms (target <= 1.5)\n", added, results["dbsm/1"].p50ms-results["direct/1"].p50ms)
	fmt.Printf("RESULT tps_ratio_dbsm_si=%.3f tps_ratio_dbsm=%.3f added_p50_ms=%.3f node_cpu_ms_per_txn=%.3f\n",
		ratioSI, ratioS, added, results["dbsm-si/8"].ordoCPU/3)
	return nil
}

func initPgbench(pgbench, dsn string) error {
	out, err := exec.Command(pgbench, "-i", "-q", "-s", strconv.Itoa(*scale), dsn).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench -i: %v\n%s", err, out)
	}
	return nil
}

// measure runs pgbench with clients spread over dsns, *runs times, and
// returns the median total TPS and the median of per-run p50 latencies.
func measure(pgbench string, dsns []string, servers []*pglocal.Server, clients int) (result, error) {
	var tpss, p50s, ordoCPUs, pgCPUs []float64
	var roleRuns []map[string]float64
	var readRuns, writeRuns []float64
	var steal float64
	var stmtRuns [][]stmtLatency
	scriptFile, err := scriptPath()
	if err != nil {
		return result{}, err
	}
	for r := 0; r < *runs; r++ {
		cpu, host := benchcluster.StartCPU(context.Background(), servers), benchcluster.SampleHost()
		dir, err := os.MkdirTemp("", "ordo-bench-cluster-")
		if err != nil {
			cpu.Stop()
			return result{}, err
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			total float64
			errs  []error
		)
		for i, dsn := range dsns {
			n := clients / len(dsns)
			if i < clients%len(dsns) {
				n++
			}
			if n == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				args := []string{"-n", "-c", strconv.Itoa(n), "-j", strconv.Itoa(n), "-M", "prepared",
					"-T", strconv.Itoa(int(duration.Seconds())), "--max-tries", "100", "-l", "--log-prefix", filepath.Join(dir, fmt.Sprint("n", i))}
				if scriptFile != "" {
					args = append(args, "-f", scriptFile)
				}
				if clients == 1 {
					args = append(args, "-r") // latency per statement
				}
				cmd := exec.Command(pgbench, append(args, dsn)...)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("pgbench: %v\n%s", err, out))
					return
				}
				m := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out)
				if m == nil {
					errs = append(errs, fmt.Errorf("pgbench printed no tps:\n%s", out))
					return
				}
				if *verbose {
					fmt.Fprintf(os.Stderr, "%s\n", out)
				}
				v, _ := strconv.ParseFloat(string(m[1]), 64)
				total += v
				if clients == 1 {
					stmtRuns = append(stmtRuns, stmtLatencies(out))
				}
			}()
		}
		wg.Wait()
		used := cpu.Stop()
		if len(errs) > 0 {
			return result{}, errs[0]
		}
		_, st := host.Until(benchcluster.SampleHost())
		steal = max(steal, st)
		lat, err := latencies(dir)
		os.RemoveAll(dir)
		if err != nil {
			return result{}, err
		}
		tpss = append(tpss, total)
		p50s = append(p50s, median(lat)/1000)
		ordoCPUs = append(ordoCPUs, used.Self.Seconds()*1000/float64(len(lat)))
		readRuns = append(readRuns, float64(used.SelfReads)/float64(len(lat)))
		writeRuns = append(writeRuns, float64(used.SelfWrites)/float64(len(lat)))
		pg, roles := used.PerTxn(float64(len(lat)))
		pgCPUs = append(pgCPUs, pg)
		roleRuns = append(roleRuns, roles)
	}
	res := result{tps: median(tpss), p50ms: median(p50s), ordoCPU: median(ordoCPUs), pgCPU: median(pgCPUs), steal: steal, pgRoles: benchcluster.MedianRoles(roleRuns),
		ordoReads: median(readRuns), ordoWrites: median(writeRuns)}
	if len(stmtRuns) > 0 {
		for i, st := range stmtRuns[0] {
			var ms []float64
			for _, run := range stmtRuns {
				if i < len(run) && run[i].sql == st.sql {
					ms = append(ms, run[i].ms)
				}
			}
			res.stmts = append(res.stmts, stmtLatency{sql: st.sql, ms: median(ms)})
		}
	}
	return res, nil
}

// scriptPath returns the pgbench script file of -script ("" for pgbench's
// builtin TPC-B-like).
func scriptPath() (string, error) {
	switch *script {
	case "tpcb-like":
		return "", nil
	case "update":
		// Issue 17's "autocommit single-row update": one statement, no
		// block, a row of a table of scale × 100,000.
		f := filepath.Join(os.TempDir(), "ordo-bench-update.sql")
		body := fmt.Sprintf("\\set aid random(1, %d)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n", 100000**scale)
		return f, os.WriteFile(f, []byte(body), 0o644)
	}
	return "", fmt.Errorf("-script %q: want tpcb-like or update", *script)
}

// latencies reads pgbench's per-transaction logs (latency in µs, 3rd field).
func latencies(dir string) ([]float64, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "n*"))
	var out []float64
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 3 {
				if v, err := strconv.ParseFloat(fields[2], 64); err == nil {
					out = append(out, v)
				}
			}
		}
		fh.Close()
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pgbench transaction log in %s", dir)
	}
	return out, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// startCluster starts three PostgreSQL servers, runs load on each, then
// starts a node in front of each; it returns the nodes' DSNs and the
// servers'.
func startCluster(ctx context.Context, protocol string, load func(dsn string) error) (dsns, servers []string, stop func(), err error) {
	c, err := startBenchCluster(ctx, protocol, load)
	if err != nil {
		return nil, nil, nil, err
	}
	return c.DSNs, c.Servers, c.Stop, nil
}

// startBenchCluster starts a 3-node cluster of protocol with the flags'
// options, load run on each server before the nodes start.
func startBenchCluster(ctx context.Context, protocol string, load func(dsn string) error) (*benchcluster.Cluster, error) {
	var logOut io.Writer
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			return nil, err
		}
		logOut = f
	}
	return benchcluster.Start(ctx, benchcluster.Options{Protocol: protocol, Load: load, Log: logOut, MetricsPort: *metrics, ApplyWorkers: *workers, NoFlush: *noFlush})
}

// runLoad is -load: pgbench -i directly, then through node 1 of a fresh
// dbsm-si cluster, waiting until every server has all the rows and the
// primary keys pgbench creates.
func runLoad(ctx context.Context, pgbench, direct string) error {
	t0 := time.Now()
	if err := initPgbench(pgbench, direct); err != nil {
		return err
	}
	tDirect := time.Since(t0).Seconds()
	fmt.Printf("direct   pgbench -i -s %d: %.2f s\n", *scale, tDirect)

	dsns, servers, stop, err := startCluster(ctx, "dbsm-si", func(string) error { return nil })
	if err != nil {
		return err
	}
	defer stop()
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
	t0 = time.Now()
	if err := initPgbench(pgbench, dsns[0]); err != nil {
		return err
	}
	tOrdo := time.Since(t0).Seconds()
	fmt.Printf("ordo     pgbench -i -s %d through node 1: %.2f s\n", *scale, tOrdo)
	want := *scale * 100000
	for i, dsn := range servers {
		for {
			out, _ := exec.Command("psql", "-Atc", "SELECT (SELECT count(*) FROM pgbench_accounts) || ' ' || "+
				"(SELECT count(*) FROM pg_indexes WHERE indexname = 'pgbench_accounts_pkey')", dsn).Output()
			if strings.TrimSpace(string(out)) == fmt.Sprintf("%d 1", want) {
				break
			}
			if time.Since(t0) > 30*time.Minute {
				return fmt.Errorf("node %d did not get the %d rows within 30 minutes (it has: %q)", i+1, want, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	tAll := time.Since(t0).Seconds()
	fmt.Printf("ordo     every node has the data: %.2f s\n", tAll)
	fmt.Printf("RESULT load_s_direct=%.2f load_s_ordo=%.2f load_s_everywhere=%.2f load_ratio=%.2f peak_rss_mb=%d\n",
		tDirect, tOrdo, tAll, tAll/tDirect, peakRSSMB())
	return nil
}

// peakRSSMB reads this process's peak resident memory (VmHWM), in MiB.
func peakRSSMB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}
