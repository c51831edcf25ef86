package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	lat := map[string][]float64{}
	for run := range *runs {
		for _, target := range []struct{ name, dsn string }{{"direct", direct}, {"ordo", dsns[0]}} {
			got, err := ddlRun(ctx, target.dsn)
			if err != nil {
				return fmt.Errorf("%s: %w", target.name, err)
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
	fmt.Println(result)
	return nil
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
