// Command analysis measures the per-statement cost of SQL analysis for the
// TPC-C and pgbench statements of internal/analysis/testdata (the golden
// corpus), cached (Analyze hit + Bind, the Parse/Bind path of a prepared
// statement or a repeated simple query) and uncached (parse + analyze +
// Bind).
//
// Then the stream of a simple-protocol client: pgbench's select-only and
// TPC-B-like statements with their literals in the text, every text new.
// Each is analyzed (and bound) as before the fingerprint cache (parsed,
// since the exact text was never seen) and as now (Analyze: the template
// of its fingerprint with its literals bound), in interleaved rounds, and
// the medians are printed side by side.
//
// It is run by `make bench-analysis` and ends with one line:
//
//	RESULT cached_us=<mean µs> cached_allocs=<allocs per statement> uncached_us=<p50 µs> literal_parse_us=<median> literal_template_us=<median> literal_speedup=<ratio>
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/catalog"
)

type stmt struct {
	name   string
	sql    string
	params []analysis.Param
	env    analysis.Env
}

func main() {
	dir := flag.String("testdata", "", "directory of the golden corpus (default: internal/analysis/testdata of the module)")
	rounds := flag.Int("rounds", 30, "uncached measurements per statement")
	flag.Parse()
	if err := run(*dir, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-analysis:", err)
		os.Exit(1)
	}
}

func run(dir string, rounds int) error {
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, "internal", "analysis", "testdata")
	}
	b, err := os.ReadFile(filepath.Join(dir, "catalog.json"))
	if err != nil {
		return err
	}
	var d catalog.Description
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("catalog.json: %w", err)
	}
	cat, err := catalog.New(d, 1)
	if err != nil {
		return err
	}
	var stmts []stmt
	for _, f := range []string{"tpcc.txt", "pgbench.txt"} {
		s, err := readCorpus(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		stmts = append(stmts, s...)
	}
	a := analysis.New(cat, analysis.Options{})
	// Check every statement once, and warm the cache.
	for _, s := range stmts {
		if err := once(a, s, true); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	fmt.Printf("%d statements (TPC-C and pgbench, from %s)\n", len(stmts), dir)

	var failed error
	cached := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := once(a, stmts[i%len(stmts)], true); err != nil {
				failed = err
				b.FailNow()
			}
		}
	})
	if failed != nil {
		return failed
	}
	fmt.Printf("cached:   %s  %d allocs/stmt  (%d iterations)\n", time.Duration(cached.NsPerOp()), cached.AllocsPerOp(), cached.N)

	var samples []time.Duration
	for r := 0; r < rounds; r++ {
		for _, s := range stmts {
			start := time.Now()
			if err := once(a, s, false); err != nil {
				return err
			}
			samples = append(samples, time.Since(start))
		}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	p := func(q float64) time.Duration { return samples[int(q*float64(len(samples)-1))] }
	fmt.Printf("uncached: p50 %s  p90 %s  p99 %s  max %s  (%d samples)\n", p(0.5), p(0.9), p(0.99), samples[len(samples)-1], len(samples))
	fmt.Printf("targets: cached <= 5us and <= 10 allocs/stmt, uncached p50 <= 100us\n")

	parse, tmpl, err := literalStream(cat, streamRounds)
	if err != nil {
		return err
	}
	fmt.Printf("RESULT cached_us=%.3f cached_allocs=%d uncached_us=%.1f literal_parse_us=%.2f literal_template_us=%.2f literal_speedup=%.1f\n",
		float64(cached.NsPerOp())/1000, cached.AllocsPerOp(), float64(p(0.5).Nanoseconds())/1000, parse, tmpl, parse/tmpl)
	return nil
}

const (
	streamRounds = 7    // interleaved rounds of each way
	streamLen    = 4000 // statements per round
)

// literalStream measures µs per statement of a pgbench simple-protocol
// stream (every text new) analyzed by parsing, as every such text was
// before the fingerprint cache, and through Analyze, and returns the
// medians over interleaved rounds.
func literalStream(cat *catalog.Catalog, rounds int) (parse, tmpl float64, err error) {
	env := analysis.NewEnv([]string{"public"})
	shapes := []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = %d;",
		"UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d;",
		"UPDATE pgbench_tellers SET tbalance = tbalance + %d WHERE tid = %d;",
		"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (%d, %d, %d, %d, CURRENT_TIMESTAMP);",
	}
	n := 0
	text := func(selectOnly bool) string {
		n++
		if selectOnly {
			return fmt.Sprintf(shapes[0], 1+n%1000000)
		}
		switch s := shapes[n%len(shapes)]; strings.Count(s, "%d") {
		case 1:
			return fmt.Sprintf(s, n)
		case 2:
			return fmt.Sprintf(s, n%5000-2500, n)
		default:
			return fmt.Sprintf(s, n%10+1, 1, n, n%5000-2500)
		}
	}
	var stats analysis.Stats
	measure := func(a *analysis.Analyzer, selectOnly, fresh bool) (float64, error) {
		texts := make([]string, streamLen)
		for i := range texts {
			texts[i] = text(selectOnly)
		}
		start := time.Now()
		for _, t := range texts {
			var out []*analysis.Statement
			var err error
			if fresh {
				out, err = a.AnalyzeUncached(t, env)
			} else {
				out, err = a.Analyze(t, env)
			}
			if err != nil {
				return 0, err
			}
			for _, st := range out {
				if _, err := st.Bind(nil); err != nil {
					return 0, err
				}
			}
		}
		return float64(time.Since(start).Microseconds()) / streamLen, nil
	}
	fmt.Printf("\nsimple-protocol stream, every text new (%d rounds of %d statements, interleaved; µs per statement, Analyze + Bind):\n", rounds, streamLen)
	fmt.Printf("%-28s %10s %10s %8s\n", "stream", "parsed", "template", "ratio")
	for _, selectOnly := range []bool{true, false} {
		name := "pgbench select-only"
		if !selectOnly {
			name = "pgbench tpcb-like statements"
		}
		a := analysis.New(cat, analysis.Options{})
		var ps, ts []float64
		for r := 0; r < rounds; r++ {
			p, err := measure(a, selectOnly, true)
			if err != nil {
				return 0, 0, err
			}
			t, err := measure(a, selectOnly, false)
			if err != nil {
				return 0, 0, err
			}
			ps, ts = append(ps, p), append(ts, t)
		}
		mp, mt := medianOf(ps), medianOf(ts)
		fmt.Printf("%-28s %10.2f %10.2f %7.1fx\n", name, mp, mt, mp/mt)
		if selectOnly {
			parse, tmpl = mp, mt
			stats = a.Stats()
		}
	}
	fmt.Printf("select-only analyzer: %d parsed (%d of them the fresh-parse rounds), %d through a template, %d exact hits\n",
		stats.Parses, rounds*streamLen, stats.TemplateHits, stats.ExactHits)
	return parse, tmpl, nil
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func once(a *analysis.Analyzer, s stmt, cached bool) error {
	var out []*analysis.Statement
	var err error
	if cached {
		out, err = a.Analyze(s.sql, s.env)
	} else {
		out, err = a.AnalyzeUncached(s.sql, s.env)
	}
	if err != nil {
		return err
	}
	for _, st := range out {
		if _, err := st.Bind(s.params); err != nil {
			return err
		}
	}
	return nil
}

// readCorpus reads the "analyze [params=…] [search_path=…]" blocks of a
// golden file (see internal/analysis/golden_test.go for the format).
func readCorpus(path string) ([]stmt, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	var out []stmt
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "analyze") {
			continue
		}
		s := stmt{name: fmt.Sprintf("%s:%d", filepath.Base(path), i+1), env: analysis.NewEnv([]string{"public"})}
		for _, f := range strings.Fields(lines[i])[1:] {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "params":
				for _, p := range strings.Split(v, "|") {
					if p == "NULL" {
						s.params = append(s.params, analysis.Param{})
					} else {
						s.params = append(s.params, analysis.Param{Value: []byte(p)})
					}
				}
			case "search_path":
				s.env = analysis.NewEnv(strings.Split(v, ","))
			}
		}
		var sql []string
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			sql = append(sql, lines[i])
		}
		s.sql = strings.Join(sql, "\n")
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no statements", path)
	}
	return out, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory; pass -testdata")
		}
		dir = parent
	}
}
