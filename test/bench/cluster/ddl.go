package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

// ddlStatements are the steps of one -ddl cycle, by the name they are
// reported under.
var ddlStatements = []struct{ name, sql string }{
	{"create", "CREATE TABLE ddl_bench (id int PRIMARY KEY, v text)"},
	{"insert", "INSERT INTO ddl_bench VALUES (1, 'x')"},
	{"drop", "DROP TABLE ddl_bench"},
}

// runDDL is -ddl: create, insert and drop cycles directly and through
// node 1 of a dbsm-si cluster, interleaved, each database first given
// -ddl-tables tables.
func runDDL(ctx context.Context, direct string) error {
	tables := func(dsn string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var b strings.Builder
		for i := range *ddlTabs {
			fmt.Fprintf(&b, "CREATE TABLE ddl_existing_%d (id int PRIMARY KEY, a text, b int, c timestamptz DEFAULT now());\n", i)
		}
		b.WriteString("INSERT INTO ddl_existing_0 (id, b) VALUES (1, 0);\n")
		_, err = conn.Exec(ctx, b.String())
		return err
	}
	if err := tables(direct); err != nil {
		return err
	}
	dsns, _, stop, err := startCluster(ctx, "dbsm-si", tables)
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
	var nodes []string
	for i := 0; *metrics != 0 && i < len(dsns); i++ {
		nodes = append(nodes, fmt.Sprintf("127.0.0.1:%d", *metrics+i))
	}
	lat := map[string][]float64{}
	moved := map[string]benchcluster.Histogram{}
	for run := range *runs {
		for _, target := range []struct{ name, dsn, other string }{{"direct", direct, direct}, {"ordo", dsns[0], dsns[1]}} {
			before := benchcluster.ReadHistograms(nodes)
			wctx, stopWriter := context.WithCancel(ctx)
			writes := make(chan []float64, 1)
			if *ddlWriter {
				go func() { writes <- writeLoop(wctx, target.other) }()
			} else {
				writes <- nil
			}
			got, err := ddlRun(ctx, target.dsn)
			stopWriter()
			w := <-writes
			if err != nil {
				return fmt.Errorf("%s: %w", target.name, err)
			}
			if *ddlWriter {
				lat["write/"+target.name] = append(lat["write/"+target.name], w...)
			}
			if target.name == "ordo" {
				moved = benchcluster.Moved(moved, before, benchcluster.ReadHistograms(nodes))
			}
			line := fmt.Sprintf("run %d %-6s", run+1, target.name)
			for _, st := range ddlStatements {
				k := target.name + "/" + st.name
				lat[k] = append(lat[k], got[st.name]...)
				line += fmt.Sprintf(" %s p50=%.2fms", st.name, median(got[st.name]))
			}
			fmt.Println(line)
		}
	}
	fmt.Printf("\n%d tables beforehand, %d cycles per run, %d runs (medians over every cycle):\n", *ddlTabs, *ddlIters, *runs)
	result := "RESULT"
	for _, st := range ddlStatements {
		d, o := median(lat["direct/"+st.name]), median(lat["ordo/"+st.name])
		fmt.Printf("  %-6s direct %.2f ms, through a node %.2f ms (+%.2f ms)\n", st.name, d, o, o-d)
		result += fmt.Sprintf(" ddl_%s_ms_direct=%.2f ddl_%s_ms_ordo=%.2f", st.name, d, st.name, o)
	}
	if *ddlWriter {
		for _, name := range []string{"direct", "ordo"} {
			w := lat["write/"+name]
			fmt.Printf("  single-row updates meanwhile (%s): %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
				map[string]string{"direct": "the same server", "ordo": "through node 2"}[name], len(w), median(w), percentile(w, 0.99), percentile(w, 1))
		}
	}
	if b := benchcluster.Breakdown(map[string]benchcluster.Histogram{}, moved); b != "" {
		fmt.Printf("  where a commit's time goes through the node (means over every transaction, the inserts' included, ms): %s\n", b)
	}
	fmt.Println(result)
	return nil
}

// writeLoop updates one row through dsn, autocommit, until ctx ends, and
// returns each update's latency in milliseconds (-ddl-writer).
func writeLoop(ctx context.Context, dsn string) []float64 {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return nil
	}
	defer conn.Close(context.Background())
	var out []float64
	for ctx.Err() == nil {
		t0 := time.Now()
		if _, err := conn.Exec(ctx, "UPDATE ddl_existing_0 SET b = b + 1 WHERE id = 1", pgx.QueryExecModeSimpleProtocol); err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "writer:", err)
			}
			continue
		}
		out = append(out, float64(time.Since(t0).Microseconds())/1000)
	}
	return out
}

// percentile returns the p-quantile (0..1) of v.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// ddlRun runs -ddl-iterations cycles on dsn and returns each statement's
// latencies in milliseconds.
func ddlRun(ctx context.Context, dsn string) (map[string][]float64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	out := map[string][]float64{}
	for range *ddlIters {
		for _, st := range ddlStatements {
			t0 := time.Now()
			if _, err := conn.Exec(ctx, st.sql, pgx.QueryExecModeSimpleProtocol); err != nil {
				return nil, fmt.Errorf("%s: %w", st.sql, err)
			}
			out[st.name] = append(out[st.name], float64(time.Since(t0).Microseconds())/1000)
		}
	}
	return out, nil
}
