// Command proxy benchmarks the Ordo wire proxy (internal/wire) and a real
// Ordo node (a one-node cluster: wire, session layer, analysis,
// termination) against PostgreSQL directly and against PgBouncer (session
// pooling), side by side on one machine (the node in front of a second
// PostgreSQL server with the same settings and data, since it takes every
// write on its server for its own):
// pgbench select-only and TPC-B-like, -M simple and -M prepared, 8
// clients, several interleaved runs, medians. It also measures the proxy's
// resident memory per idle session with 500 idle sessions.
//
// The proxy and the node each run in a child process (this binary
// re-executed with ORDO_BENCH_PROXY or ORDO_BENCH_NODE set) so their CPU
// and RSS are measured alone; -cpuprofile F writes a CPU profile of the
// node's process to F, -memprofile F its allocations. PgBouncer runs as the OS user "postgres", since it
// refuses to run as root.
//
// The last line is machine-readable:
//
//	RESULT ordo_direct_ratio=<select-only simple> ordo_pgbouncer_ratio=<worst mode> rss_per_idle_kib=<n> node_direct_ratio=<select-only simple> node_pgbouncer_ratio=<select-only simple> node_direct_ratio_prepared=<select-only prepared> node_pgbouncer_ratio_prepared=<…>
//
// -relays adds byte relays, one per design (relays.go), as bounds.
//
// Run with `make bench-proxy` (go run ./test/bench/proxy). Not part of
// `go test`.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/wire"
	"github.com/ordo-db/ordo/pkg/config"
	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

func main() {
	if dsn := os.Getenv("ORDO_BENCH_NODE"); dsn != "" {
		if err := runNode(dsn); err != nil {
			fmt.Fprintln(os.Stderr, "node:", err)
			os.Exit(1)
		}
		return
	}
	if kind, backend, ok := strings.Cut(os.Getenv("ORDO_BENCH_RELAY"), " "); ok {
		fmt.Fprintln(os.Stderr, "relay:", runRelay(kind, backend)) // it returns on failure only
		os.Exit(1)
	}
	if addr := os.Getenv("ORDO_BENCH_PROXY"); addr != "" {
		if err := runProxy(addr); err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			os.Exit(1)
		}
		return
	}
	duration := flag.Duration("duration", 8*time.Second, "length of each pgbench run")
	runs := flag.Int("runs", 3, "runs per target and mode (median reported)")
	clients := flag.Int("clients", 8, "pgbench clients")
	scale := flag.Int("scale", 10, "pgbench scale factor")
	idle := flag.Int("idle", 500, "idle sessions for the RSS measurement")
	procs := flag.Int("proxy-gomaxprocs", 0, "GOMAXPROCS of the proxy process (0 = Go's default)")
	only := flag.String("only", "", "run only modes whose \"workload/protocol\" contains this (for quick experiments)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the node's process to this file")
	memprofile := flag.String("memprofile", "", "write a heap profile of the node's process (allocations included) to this file when it stops")
	relayKinds := flag.String("relay-kinds", "go,epoll,epoll-procs,netpoll,half", "the byte relays -relays measures (relays.go)")
	relays := flag.Bool("relays", false, "also measure byte relays, one per design (goroutines; epoll on a thread, with GOMAXPROCS 1 and default; epoll in Go's netpoller), that bound what a relay can reach (relays.go)")
	flag.Parse()
	// The node's child process writes the profiles: it is told where by
	// environment variables, as absolute paths.
	for env, file := range map[string]string{"ORDO_BENCH_NODE_CPUPROFILE": *cpuprofile, "ORDO_BENCH_NODE_MEMPROFILE": *memprofile} {
		if file == "" {
			continue
		}
		abs, err := filepath.Abs(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-proxy:", err)
			os.Exit(1)
		}
		os.Setenv(env, abs)
	}
	if *procs > 0 {
		os.Setenv("ORDO_BENCH_PROXY_GOMAXPROCS", strconv.Itoa(*procs))
	}
	if err := run(*duration, *runs, *clients, *scale, *idle, *only, *relays, *relayKinds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-proxy:", err)
		os.Exit(1)
	}
}

// runProxy is the child process: a transparent proxy in front of backend,
// printing its listen address. On SIGUSR1 it collects garbage and returns
// freed memory to the OS, so the parent measures live memory.
func runProxy(backend string) error {
	if n, _ := strconv.Atoi(os.Getenv("ORDO_BENCH_PROXY_GOMAXPROCS")); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	srv, err := wire.NewServer(wire.Config{
		BackendAddr:    backend,
		AllowPlaintext: true,
		MaxConns:       2000,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	if f := os.Getenv("ORDO_BENCH_CPUPROFILE"); f != "" {
		fh, err := os.Create(f)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(fh); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); fh.Close() }()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM)
	go func() {
		for s := range sig {
			if s == syscall.SIGTERM {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = srv.Shutdown(ctx)
				cancel()
				ln.Close()
				return
			}
			runtime.GC()
			debug.FreeOSMemory()
			fmt.Println("gc")
		}
	}()
	if err := srv.Serve(ln); !errors.Is(err, wire.ErrServerClosed) {
		return err
	}
	return nil
}

// runNode is the child process of the node target: a one-node Ordo
// cluster in front of the PostgreSQL server at dsn, printing its client
// address. It runs until SIGTERM.
func runNode(dsn string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "ordo-bench-node-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	listen, err := freeAddr()
	if err != nil {
		return err
	}
	peer, err := freeAddr()
	if err != nil {
		return err
	}
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	cfg := &config.Node{ID: 1, Listen: listen, PeerListen: peer, Postgres: dsn, DataDir: dir,
		Peers: map[uint32]string{1: peer}, Protocol: "dbsm-si", MetricsListen: metrics}
	cfg.Defaults()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer n.Stop()
	if f := os.Getenv("ORDO_BENCH_NODE_CPUPROFILE"); f != "" {
		fh, err := os.Create(f)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(fh); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); fh.Close() }()
	}
	if f := os.Getenv("ORDO_BENCH_NODE_MEMPROFILE"); f != "" {
		defer func() {
			if fh, err := os.Create(f); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(fh, 0)
				fh.Close()
			}
		}()
	}
	fmt.Println(n.ClientAddr())
	fmt.Println(metrics)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	return nil
}

// analysisCounts reads ordo_analysis_statements_total of the node serving
// /metrics at addr: "parsed=… cached=… template=…".
func analysisCounts(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "?"
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, `ordo_analysis_statements_total{how="`); ok {
			how, v, _ := strings.Cut(rest, `"} `)
			out = append(out, how+"="+v)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

type endpoint struct {
	name string
	host string
	port int
}

type sample struct{ tps, latMs, cpuUsPerTx float64 }

func run(duration time.Duration, runs, clients, scale, idle int, only string, relays bool, relayKinds string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proxyProcs := os.Getenv("ORDO_BENCH_PROXY_GOMAXPROCS")
	if proxyProcs == "" {
		proxyProcs = "default"
	}
	fmt.Printf("bench-proxy: %d clients, %d runs of %v per target and mode, scale %d, %d CPUs, proxy GOMAXPROCS %s\n",
		clients, runs, duration, scale, runtime.NumCPU(), proxyProcs)
	// Two servers with the same settings (fsync on) and data: the node's
	// own (it replicates every write on its server, and would take the
	// other targets' writes for writes that bypassed it) and the one of
	// the other targets.
	c, err := pglocal.Start(ctx, pglocal.Options{N: 2, Fsync: true, Settings: map[string]string{
		"max_connections": strconv.Itoa(idle + 100), "shared_buffers": "256MB"}})
	if err != nil {
		return err
	}
	defer c.Stop()
	pg, nodePG := c.Servers[0], c.Servers[1]
	direct := endpoint{"direct", pg.Host, pg.Port}

	// The proxy, in a child process.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	lines, child, err := startChild(self, "ORDO_BENCH_PROXY="+pg.Addr())
	if err != nil {
		return err
	}
	defer stopChild(child)
	if !lines.Scan() {
		return errors.New("proxy child printed no address")
	}
	ordo, err := toEndpoint("ordo", lines.Text())
	if err != nil {
		return err
	}

	bouncerPort, bouncerPID, stopBouncer, err := benchcluster.StartPgBouncer(pg, clients+10)
	bouncer := endpoint{"pgbouncer", "127.0.0.1", bouncerPort}
	if err != nil {
		return err
	}
	defer stopBouncer()

	env := func(e endpoint) []string {
		return append(os.Environ(), "PGHOST="+e.host, "PGPORT="+strconv.Itoa(e.port), "PGUSER="+pg.User,
			"PGPASSWORD="+pg.Password, "PGDATABASE=postgres", "PGSSLMODE=disable")
	}
	fmt.Println("initializing pgbench tables…")
	for _, e := range []endpoint{direct, {"node's server", nodePG.Host, nodePG.Port}} {
		if out, err := pgbenchCmd(env(e), "-i", "-q", "-s", strconv.Itoa(scale)).CombinedOutput(); err != nil {
			return fmt.Errorf("pgbench -i on %s: %v\n%s", e.name, err, out)
		}
	}

	// The node, in a child process, started once the tables exist so its
	// catalog knows them.
	nodeLines, nodeChild, err := startChild(self, "ORDO_BENCH_NODE="+nodePG.DSN("postgres"))
	if err != nil {
		return err
	}
	defer stopChild(nodeChild)
	if !nodeLines.Scan() {
		return errors.New("node child printed no address")
	}
	nodeEP, err := toEndpoint("node", nodeLines.Text())
	if err != nil {
		return err
	}
	if !nodeLines.Scan() {
		return errors.New("node child printed no metrics address")
	}
	nodeMetrics := nodeLines.Text()
	analyzed := func() string { return analysisCounts(nodeMetrics) }

	type mode struct{ workload, protocol string }
	var modes []mode
	for _, m := range []mode{{"select-only", "simple"}, {"select-only", "prepared"}, {"tpcb-like", "simple"}, {"tpcb-like", "prepared"}} {
		if strings.Contains(m.workload+"/"+m.protocol, only) {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return fmt.Errorf("no mode matches -only %q", only)
	}
	targets := []endpoint{direct, ordo, nodeEP, bouncer}
	pids := map[string]int{"ordo": child.Process.Pid, "node": nodeChild.Process.Pid, "pgbouncer": bouncerPID}
	var relayNames []string
	if relays {
		for _, kind := range strings.Split(relayKinds, ",") {
			rl, rc, err := startChild(self, "ORDO_BENCH_RELAY="+kind+" "+pg.Addr())
			if err != nil {
				return err
			}
			defer stopChild(rc)
			if !rl.Scan() {
				return fmt.Errorf("%s relay printed no address", kind)
			}
			ep, err := toEndpoint(kind+"-relay", rl.Text())
			if err != nil {
				return err
			}
			targets = append(targets, ep)
			pids[ep.name] = rc.Process.Pid
			relayNames = append(relayNames, ep.name)
		}
	}
	results := map[mode]map[string][]sample{}
	for _, m := range modes {
		results[m] = map[string][]sample{}
	}
	tpsRE := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latRE := regexp.MustCompile(`latency average = ([0-9.]+) ms`)
	for r := 0; r < runs; r++ {
		for _, m := range modes {
			// Rotate the target order each run so drift hits all alike.
			for i := range targets {
				tg := targets[(i+r)%len(targets)]
				args := []string{"-n", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 4)),
					"-T", strconv.Itoa(int(duration.Seconds())), "-M", m.protocol}
				if m.workload == "select-only" {
					args = append(args, "-S")
				}
				pid := pids[tg.name]
				before := ""
				if tg.name == "node" {
					before = analyzed()
				}
				cpu0, cs0, host0 := cpuTicks(pid), ctxSwitches(pid), benchcluster.SampleHost()
				out, err := pgbenchCmd(env(tg), args...).CombinedOutput()
				cpu, cs := cpuTicks(pid)-cpu0, ctxSwitches(pid)-cs0
				busy, steal := host0.Until(benchcluster.SampleHost())
				if err != nil {
					return fmt.Errorf("pgbench %v against %s: %v\n%s", args, tg.name, err, out)
				}
				tm, lm := tpsRE.FindSubmatch(out), latRE.FindSubmatch(out)
				if tm == nil || lm == nil {
					return fmt.Errorf("cannot parse pgbench output:\n%s", out)
				}
				tps, _ := strconv.ParseFloat(string(tm[1]), 64)
				lat, _ := strconv.ParseFloat(string(lm[1]), 64)
				perTx, csPerTx := 0.0, 0.0
				if pid != 0 && tps > 0 {
					perTx = float64(cpu) * 1e6 / clkTck / (tps * duration.Seconds())
					csPerTx = float64(cs) / (tps * duration.Seconds())
				}
				results[m][tg.name] = append(results[m][tg.name], sample{tps, lat, perTx})
				fmt.Printf("  run %d %-11s %-8s %-9s tps %9.1f  latency %6.3f ms  proxy CPU %5.1f µs/tx, %4.2f context switches/tx; machine busy %3.0f %%, stolen %4.1f %%\n",
					r+1, m.workload, m.protocol, tg.name, tps, lat, perTx, csPerTx, 100*busy, 100*steal)
				if tg.name == "node" {
					fmt.Printf("      node's texts analyzed: %s before the run, %s after\n", before, analyzed())
				}
			}
		}
	}

	fmt.Println()
	fmt.Println("ordo = the wire proxy alone; node = a one-node Ordo cluster (session layer, analysis, termination)")
	fmt.Printf("%-11s %-8s | %10s %10s %10s %10s | %8s %8s %8s %8s | %9s %9s %9s %9s | %s\n", "workload", "protocol",
		"direct tps", "ordo tps", "node tps", "pgb tps", "direct ms", "ordo ms", "node ms", "pgb ms",
		"ordo/dir", "ordo/pgb", "node/dir", "node/pgb", "CPU µs/tx ordo node pgb")
	directRatio, worstBouncer := 0.0, 0.0
	nodeRatios := map[string][2]float64{}
	for i, m := range modes {
		d, o, nd, b := median(results[m]["direct"]), median(results[m]["ordo"]), median(results[m]["node"]), median(results[m]["pgbouncer"])
		rd, rb := o.tps/d.tps, o.tps/b.tps
		nrd, nrb := nd.tps/d.tps, nd.tps/b.tps
		fmt.Printf("%-11s %-8s | %10.1f %10.1f %10.1f %10.1f | %8.3f %8.3f %8.3f %8.3f | %9.3f %9.3f %9.3f %9.3f | %5.1f %5.1f %5.1f\n",
			m.workload, m.protocol, d.tps, o.tps, nd.tps, b.tps, d.latMs, o.latMs, nd.latMs, b.latMs, rd, rb, nrd, nrb,
			o.cpuUsPerTx, nd.cpuUsPerTx, b.cpuUsPerTx)
		if m.workload == "select-only" && m.protocol == "simple" {
			directRatio = rd
		}
		if m.workload == "select-only" {
			nodeRatios[m.protocol] = [2]float64{nrd, nrb}
		}
		if i == 0 || rb < worstBouncer {
			worstBouncer = rb
		}
	}

	if len(relayNames) > 0 {
		fmt.Println()
		fmt.Println("byte relays (relays.go): what a relay of each design reaches, reading nothing")
		for _, m := range modes {
			b := median(results[m]["pgbouncer"])
			for _, name := range relayNames {
				r := median(results[m][name])
				fmt.Printf("%-11s %-8s %-17s tps %9.1f  ÷ pgbouncer %5.3f  CPU %5.1f µs/tx (pgbouncer %5.1f)\n",
					m.workload, m.protocol, name, r.tps, r.tps/b.tps, r.cpuUsPerTx, b.cpuUsPerTx)
			}
		}
	}

	rss, err := rssPerIdle(ctx, child.Process.Pid, lines, ordo, pg, idle)
	if err != nil {
		return err
	}
	fmt.Printf("RESULT ordo_direct_ratio=%.3f ordo_pgbouncer_ratio=%.3f rss_per_idle_kib=%.1f node_direct_ratio=%.3f node_pgbouncer_ratio=%.3f node_direct_ratio_prepared=%.3f node_pgbouncer_ratio_prepared=%.3f\n",
		directRatio, worstBouncer, rss, nodeRatios["simple"][0], nodeRatios["simple"][1], nodeRatios["prepared"][0], nodeRatios["prepared"][1])
	return nil
}

func pgbenchCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("pgbench", args...)
	cmd.Env = env
	return cmd
}

func toEndpoint(name, addr string) (endpoint, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return endpoint{}, err
	}
	p, err := strconv.Atoi(port)
	return endpoint{name, host, p}, err
}

func median(s []sample) sample {
	if len(s) == 0 {
		return sample{}
	}
	t := append([]sample(nil), s...)
	sort.Slice(t, func(i, j int) bool { return t[i].tps < t[j].tps })
	return t[len(t)/2]
}

// rssPerIdle opens n idle sessions through the proxy and returns the growth
// of the proxy process's RSS per session, in KiB, measured after a GC in
// the proxy both before and after.
func rssPerIdle(ctx context.Context, pid int, childOut *bufio.Scanner, ordo endpoint, pg *pglocal.Server, n int) (float64, error) {
	gc := func() error {
		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
			return err
		}
		if !childOut.Scan() || childOut.Text() != "gc" {
			return errors.New("proxy child did not acknowledge GC")
		}
		time.Sleep(200 * time.Millisecond)
		return nil
	}
	// Let the proxy forget the benchmark's sessions first.
	time.Sleep(time.Second)
	if err := gc(); err != nil {
		return 0, err
	}
	before, err := rssKiB(pid)
	if err != nil {
		return 0, err
	}
	dsn := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres sslmode=disable", ordo.host, ordo.port, pg.User, pg.Password)
	conns := make([]*pgconn.PgConn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()
	for i := 0; i < n; i++ {
		c, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			return 0, fmt.Errorf("idle session %d: %w", i, err)
		}
		// One statement each, as a real client would before idling.
		if _, err := c.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
			return 0, err
		}
		conns = append(conns, c)
	}
	rawAfter, err := rssKiB(pid)
	if err != nil {
		return 0, err
	}
	if err := gc(); err != nil {
		return 0, err
	}
	after, err := rssKiB(pid)
	if err != nil {
		return 0, err
	}
	fmt.Printf("proxy RSS: %d KiB before, %d KiB with %d idle sessions (%d KiB before GC): %.1f KiB per idle session (%.1f before GC)\n",
		before, after, n, rawAfter, float64(after-before)/float64(n), float64(rawAfter-before)/float64(n))
	return float64(after-before) / float64(n), nil
}

// clkTck is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
const clkTck = 100

// cpuTicks returns user+system CPU time of pid (and its threads), 0 for
// pid 0.
func cpuTicks(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the ")" that ends the command name; utime and stime are
	// fields 14 and 15 of the whole line.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// ctxSwitches returns the context switches of all threads of pid.
func ctxSwitches(pid int) int64 {
	if pid == 0 {
		return 0
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "voluntary_ctxt_switches:") || strings.HasPrefix(line, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), 10, 64)
				n += v
			}
		}
	}
	return n
}

func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}

// startChild runs this program again with env added (the child serves
// what env asks for) and returns its standard output, line by line.
func startChild(self, env string) (*bufio.Scanner, *exec.Cmd, error) {
	child := exec.Command(self)
	child.Env = append(os.Environ(), env)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := child.Start(); err != nil {
		return nil, nil, err
	}
	return bufio.NewScanner(out), child, nil
}

// stopChild stops a child of startChild and waits for it.
func stopChild(child *exec.Cmd) {
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()
}
