// Command bench is `make bench-tpcc`: TPC-C (package tpcc) against one
// PostgreSQL directly (the baseline) and against a 3-node Ordo cluster
// under dbsm, dbsm-si, pgr and cons (cons at table and at warehouse
// grain), with 1 and 8 clients per node (the same clients against the
// baseline), one warehouse per node. The cluster is started and loaded
// once, through the nodes; it switches protocols online between runs
// (ordoctl protocol set), and TPC-C's classes are applied with the real
// ordoctl. Runs are interleaved: each round measures every configuration
// once, so drift in the machine and the data's growth fall on all of
// them alike; medians over the rounds are reported.
//
// It prints a table and one line per configuration:
//
//	RESULT protocol=<p> grain=<g> clients=<per node> tpmc=<n> ratio_direct=<tpmC / direct tpmC> abort_pct=<aborted attempts %> p50_ms=<New-Order p50>
//
// grain is, for dbsm and pgr, "table" (the class file applied without its
// splits: Ordo certifies key lookups as rows and every other read as its
// whole table, the paper's coarse grain) or "warehouse" (the class file
// as shipped, which splits every table with a warehouse column by it:
// reads that fix the warehouse read its granule, the fine grain),
// "none" for dbsm-si (reads are not certified) and the baseline, and the
// classes' grain for cons. Aborts are also broken down by where they come
// from: Ordo's certification and other reasons (ordo_replica_transactions_total),
// the rest being PostgreSQL's own serialization failures on the origin,
// and by type (New-Order, Payment, Delivery; the read-only types never
// abort).
// Consistency conditions 1–4 are checked on every server at the end.
//
// With -wan D, every byte between two nodes is delayed by D each way
// during the runs (not the load), as between the sites of a wide-area
// cluster: Postgres-R's second round through the order shows in its
// latency.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/test/bench/tpcc"
	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

var (
	runs      = flag.Int("runs", 3, "rounds (every configuration once per round; medians are reported)")
	duration  = flag.Duration("duration", 30*time.Second, "length of one run")
	clientsF  = flag.String("clients", "1,8", "clients per node (comma-separated)")
	configsF  = flag.String("configs", "dbsm/table,dbsm/warehouse,dbsm-si,pgr/table,pgr/warehouse,cons/table,cons/warehouse", "protocol[/grain] to measure (comma-separated; dbsm and pgr without a grain: warehouse)")
	small     = flag.Bool("small", false, "load about 1 % of the specification's rows (for quick runs)")
	classFile = flag.String("classes", "deployments/examples/tpcc-classes.yaml", "the class file in force (dbsm and pgr at table grain: without its splits)")
	wan       = flag.Duration("wan", 0, "one-way delay between every two nodes during the runs (after the load), e.g. 60ms")
	plotFile  = flag.String("plot", filepath.Join(os.TempDir(), "ordo-bench-tpcc.svg"), "where to write the plot of the medians (SVG; empty: none)")
)

// config is one measured configuration.
type config struct {
	protocol string
	grain    tpcc.Grain
	clients  int
}

func (c config) key() string { return fmt.Sprintf("%s/%s/%d", c.protocol, c.grainName(), c.clients) }

func (c config) grainName() string {
	switch c.protocol {
	case "dbsm", "pgr":
		if c.grain == tpcc.GrainTable {
			return "table" // the class file without its splits: no granules
		}
		return "warehouse" // the classes' granules
	case "cons":
		return c.grain.String()
	}
	return "none"
}

// split reports whether the configuration runs with the class file's
// splits in force (all but dbsm and pgr at table grain).
func (c config) split() bool {
	return !((c.protocol == "dbsm" || c.protocol == "pgr") && c.grain == tpcc.GrainTable)
}

// driverGrain is the grain the driver declares classes at (cons only).
func (c config) driverGrain() tpcc.Grain {
	if c.protocol == "cons" {
		return c.grain
	}
	return tpcc.GrainNone
}

// sample is one run's figures.
type sample struct {
	tpmc, abortPct, p50 float64
	reasons             map[string]float64 // Ordo's local aborts by reason
	driverAborts        int
	typeAbortPct        [5]float64 // aborted attempts of each type, % of its attempts
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-tpcc:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	scale := tpcc.Spec
	if *small {
		scale = tpcc.Small
	}
	var clients []int
	for _, s := range strings.Split(*clientsF, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil {
			return fmt.Errorf("-clients: %w", err)
		}
		clients = append(clients, n)
	}
	var configs []config
	for _, n := range clients {
		configs = append(configs, config{protocol: "direct", clients: n})
		for _, s := range strings.Split(*configsF, ",") {
			p, g, _ := strings.Cut(s, "/")
			grain, err := tpcc.ParseGrain(g)
			if err != nil {
				return err
			}
			configs = append(configs, config{protocol: p, grain: grain, clients: n})
		}
	}
	const nodes, warehouses = 3, 3

	direct, err := pglocal.Start(ctx, pglocal.Options{N: 1, Fsync: true})
	if err != nil {
		return err
	}
	defer direct.Stop()
	directDSN := direct.Servers[0].DSN("postgres")
	t0 := time.Now()
	if err := tpcc.Load(ctx, []string{directDSN}, warehouses, scale, 1); err != nil {
		return err
	}
	fmt.Printf("direct: loaded %d warehouses in %.1f s\n", warehouses, time.Since(t0).Seconds())

	c, err := benchcluster.Start(ctx, benchcluster.Options{N: nodes, Protocol: "dbsm-si", Delayable: *wan > 0})
	if err != nil {
		return err
	}
	defer c.Stop()
	t0 = time.Now()
	if err := tpcc.Load(ctx, c.DSNs, warehouses, scale, 1); err != nil {
		return err
	}
	if err := converge(ctx, c); err != nil {
		return err
	}
	fmt.Printf("cluster: loaded %d warehouses through the nodes in %.1f s\n", warehouses, time.Since(t0).Seconds())
	octl, err := buildOrdoctl()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(octl))
	unsplit, err := unsplitClasses(filepath.Dir(octl))
	if err != nil {
		return err
	}
	split := true
	if err := applyClasses(c, octl, *classFile); err != nil {
		return err
	}
	if *wan > 0 {
		c.SetDelay(*wan)
		fmt.Printf("cluster: %s one way between every two nodes from now on\n", *wan)
	}

	samples := map[string][]sample{}
	current := "dbsm-si"
	for round := 1; round <= *runs; round++ {
		for _, cf := range configs {
			dsns := c.DSNs
			if cf.protocol == "direct" {
				dsns = []string{directDSN, directDSN, directDSN}
			} else if cf.split() != split {
				// dbsm and pgr at table grain: the classes without their
				// splits (no granules); every other configuration: as
				// shipped.
				file := *classFile
				if !cf.split() {
					file = unsplit
				}
				if err := applyClasses(c, octl, file); err != nil {
					return err
				}
				split = cf.split()
			}
			if cf.protocol != "direct" && cf.protocol != current {
				if _, err := c.Nodes[0].Replica().SwitchProtocol(ctx, cf.protocol); err != nil {
					return err
				}
				current = cf.protocol
				if err := converge(ctx, c); err != nil {
					return err
				}
			}
			before := ordoAborts(c)
			rep, err := tpcc.Run(ctx, tpcc.Config{DSNs: dsns, Warehouses: warehouses, Scale: scale, ClientsPerNode: cf.clients,
				Duration: *duration, Grain: cf.driverGrain(), Seed: uint64(time.Now().UnixNano())})
			if err != nil {
				return err
			}
			if err := converge(ctx, c); err != nil {
				return err
			}
			s := sample{tpmc: rep.TpmC(), abortPct: rep.AbortPct(), p50: ms(rep.Stats[tpcc.NewOrder].Percentile(0.5)), reasons: map[string]float64{}}
			for k, st := range rep.Stats {
				s.driverAborts += st.AbortCount()
				if n := st.Attempts(); n > 0 {
					s.typeAbortPct[k] = 100 * float64(st.AbortCount()) / float64(n)
				}
			}
			if cf.protocol != "direct" {
				for r, v := range ordoAborts(c) {
					if d := v - before[r]; d > 0 {
						s.reasons[r] = d
					}
				}
			}
			samples[cf.key()] = append(samples[cf.key()], s)
			fmt.Printf("round %d %-8s grain=%-9s clients=%d tpmC=%.0f aborts=%.1f%% p50_no=%.1fms failures=%d\n",
				round, cf.protocol, cf.grainName(), cf.clients, s.tpmc, s.abortPct, s.p50, rep.Failures())
			if *runs == 1 || round == *runs {
				var b strings.Builder
				rep.Print(&b)
				fmt.Print(indent(b.String()))
			}
		}
	}

	for i, dsn := range append([]string{directDSN}, c.Servers...) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		err = tpcc.Check(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			return fmt.Errorf("server %d (0: direct): %w", i, err)
		}
	}
	fmt.Println("\nconsistency conditions 1-4 hold on the baseline and on every node")

	fmt.Printf("\nmedians of %d runs of %s, %d warehouses (one per node), %s population, %s one-way delay between nodes\n",
		*runs, *duration, warehouses, map[bool]string{true: "small", false: "full"}[*small], *wan)
	fmt.Printf("%-8s %-9s %7s %9s %7s %7s %8s  %-24s %s\n", "protocol", "grain", "clients", "tpmC", "ratio", "abort%", "p50_ms", "abort% NO/P/D", "aborts by reason (per run)")
	var results []string
	var bars []bar
	for _, cf := range configs {
		ss := samples[cf.key()]
		base := median(samples[config{protocol: "direct", clients: cf.clients}.key()], func(s sample) float64 { return s.tpmc })
		tpmc := median(ss, func(s sample) float64 { return s.tpmc })
		ab := median(ss, func(s sample) float64 { return s.abortPct })
		p50 := median(ss, func(s sample) float64 { return s.p50 })
		byType := fmt.Sprintf("%.1f/%.1f/%.1f", median(ss, func(s sample) float64 { return s.typeAbortPct[tpcc.NewOrder] }),
			median(ss, func(s sample) float64 { return s.typeAbortPct[tpcc.Payment] }), median(ss, func(s sample) float64 { return s.typeAbortPct[tpcc.Delivery] }))
		fmt.Printf("%-8s %-9s %7d %9.0f %7.2f %7.2f %8.2f  %-24s %s\n", cf.protocol, cf.grainName(), cf.clients, tpmc, tpmc/base, ab, p50, byType, reasonString(ss))
		results = append(results, fmt.Sprintf("RESULT protocol=%s grain=%s clients=%d tpmc=%.0f ratio_direct=%.3f abort_pct=%.2f p50_ms=%.2f",
			cf.protocol, cf.grainName(), cf.clients, tpmc, tpmc/base, ab, p50))
		label := cf.protocol + "/" + cf.grainName()
		if cf.protocol == "direct" || cf.grainName() == "none" {
			label = cf.protocol
		}
		bars = append(bars, bar{label: label, clients: cf.clients, tpmc: tpmc, ratio: tpmc / base, abort: ab})
	}
	if *plotFile != "" {
		f, err := os.Create(*plotFile)
		if err != nil {
			return err
		}
		title := fmt.Sprintf("TPC-C, %d warehouses, medians of %d runs of %s (%s population, %s between nodes)",
			warehouses, *runs, *duration, map[bool]string{true: "small", false: "full"}[*small], *wan)
		err = plotSVG(f, title, bars)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Printf("\nplot: %s\n", *plotFile)
	}
	fmt.Println()
	for _, r := range results {
		fmt.Println(r)
	}
	return nil
}

// converge waits until every node has applied everything ordered.
func converge(ctx context.Context, c *benchcluster.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for _, n := range c.Nodes {
		if err := n.Replica().SyncRead(ctx); err != nil {
			return err
		}
	}
	return nil
}

// buildOrdoctl builds the real ordoctl into a temporary directory.
func buildOrdoctl() (string, error) {
	dir, err := os.MkdirTemp("", "ordo-bench-tpcc-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ordoctl")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ordoctl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ordoctl: %v\n%s", err, out)
	}
	return bin, nil
}

// unsplitClasses writes, into dir, the class file with no class split:
// dbsm and pgr then have no granules (table grain).
func unsplitClasses(dir string) (string, error) {
	b, err := os.ReadFile(*classFile)
	if err != nil {
		return "", err
	}
	var ch admin.ClassesChange
	if err := yaml.Unmarshal(b, &ch); err != nil {
		return "", fmt.Errorf("%s: %w", *classFile, err)
	}
	for i := range ch.Classes {
		ch.Classes[i].Label, ch.Classes[i].Columns = "", nil
	}
	for i := range ch.Profiles {
		// warehouse[w={w}] names a partition of a split class: the whole
		// class now (cons runs with the shipped file anyway).
		ch.Profiles[i].Classes = partition.ReplaceAllString(ch.Profiles[i].Classes, "")
	}
	out, err := yaml.Marshal(ch)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "tpcc-classes-unsplit.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

var partition = regexp.MustCompile(`\[[^\]]*\]`)

// applyClasses applies a class file with the real ordoctl.
func applyClasses(c *benchcluster.Cluster, octl, file string) error {
	out, err := exec.Command(octl, "classes", "apply", "-f", file, "--data-dir", c.Configs[0].DataDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ordoctl classes apply -f %s: %v\n%s", file, err, out)
	}
	return converge(context.Background(), c)
}

// ordoAborts sums, over the nodes, the local transactions Ordo aborted,
// by reason.
func ordoAborts(c *benchcluster.Cluster) map[string]float64 {
	out := map[string]float64{}
	for _, n := range c.Nodes {
		mfs, err := n.Registry().Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "ordo_replica_transactions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["origin"] == "local" && l["outcome"] == "abort" {
					out[l["reason"]] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// reasonString is the median per reason of Ordo's aborts, and the
// driver's other aborts (PostgreSQL's own, on the origin).
func reasonString(ss []sample) string {
	reasons := map[string]bool{}
	for _, s := range ss {
		for r := range s.reasons {
			reasons[r] = true
		}
	}
	var names []string
	for r := range reasons {
		names = append(names, r)
	}
	sort.Strings(names)
	var parts []string
	for _, r := range names {
		parts = append(parts, fmt.Sprintf("%s=%.0f", r, median(ss, func(s sample) float64 { return s.reasons[r] })))
	}
	local := median(ss, func(s sample) float64 {
		n := float64(s.driverAborts)
		for _, v := range s.reasons {
			n -= v
		}
		return max(n, 0)
	})
	parts = append(parts, fmt.Sprintf("postgres=%.0f", local))
	return strings.Join(parts, " ")
}

func median(ss []sample, f func(sample) float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
