// Command capture benchmarks Ordo's database interface on real PostgreSQL:
// capture latency (PREPARE sent -> write set in hand) for 1-row and
// 100-row transactions, apply throughput against direct COPY and single
// INSERTs, and the speedup of parallel apply on a non-conflicting
// workload. It ends with one machine-readable line:
//
//	RESULT capture_p50_ms=<1-row> apply_vs_insert=<ratio> parallel_speedup=<ratio>
//
// apply_vs_insert is apply rows/s divided by the rows/s of the same rows
// inserted directly, one INSERT statement per row, in one transaction.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/txn"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-capture:", err)
		os.Exit(1)
	}
}

const ddl = `SET search_path = public;
CREATE TABLE t (id int PRIMARY KEY, v text, n int);
CREATE TABLE direct (id int PRIMARY KEY, v text, n int);
CREATE TABLE copied (id int PRIMARY KEY, v text, n int);`

func run() error {
	ctx := context.Background()
	cl, err := pglocal.Start(ctx, pglocal.Options{N: 2})
	if err != nil {
		return err
	}
	defer cl.Stop()
	a, b := cl.Servers[0], cl.Servers[1]
	ca, err := pgx.Connect(ctx, a.DSN("postgres"))
	if err != nil {
		return err
	}
	defer ca.Close(ctx)
	cb, err := pgx.Connect(ctx, b.DSN("postgres"))
	if err != nil {
		return err
	}
	defer cb.Close(ctx)
	for _, c := range []*pgx.Conn{ca, cb} {
		if _, err := c.Exec(ctx, ddl); err != nil {
			return err
		}
	}
	if err := apply.Bootstrap(ctx, cb); err != nil {
		return err
	}
	capt, err := capture.Start(ctx, capture.Config{DSN: a.DSN("postgres"), AwaitTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer capt.Stop()

	var gidN uint64
	next := 0
	// txnRows prepares a transaction inserting rows rows on A and returns
	// its write set and the capture latency.
	txnRows := func(rows int) (*capture.WriteSet, time.Duration, error) {
		gidN++
		gid := txn.NewGID(1, gidN)
		if _, err := ca.Exec(ctx, "BEGIN"); err != nil {
			return nil, 0, err
		}
		if _, err := ca.Exec(ctx, "INSERT INTO t SELECT g, md5(g::text), g FROM generate_series($1::int, $2::int) g", next, next+rows-1); err != nil {
			return nil, 0, err
		}
		next += rows
		began := time.Now()
		if _, err := ca.Exec(ctx, "PREPARE TRANSACTION '"+string(gid)+"'"); err != nil {
			return nil, 0, err
		}
		ws, err := capt.Await(ctx, gid)
		lat := time.Since(began)
		if err != nil {
			return nil, 0, err
		}
		_, err = ca.Exec(ctx, "COMMIT PREPARED '"+string(gid)+"'")
		return ws, lat, err
	}

	lat := func(rows, n int) ([]*capture.WriteSet, float64, float64, error) {
		var ds []time.Duration
		var wss []*capture.WriteSet
		for i := 0; i < n; i++ {
			ws, d, err := txnRows(rows)
			if err != nil {
				return nil, 0, 0, err
			}
			ds = append(ds, d)
			wss = append(wss, ws)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		return wss, ms(ds[len(ds)/2]), ms(ds[len(ds)*99/100]), nil
	}
	ws1, p50_1, p99_1, err := lat(1, 200)
	if err != nil {
		return err
	}
	fmt.Printf("capture latency 1-row:   p50 %.2f ms  p99 %.2f ms\n", p50_1, p99_1)
	ws100, p50_100, p99_100, err := lat(100, 100)
	if err != nil {
		return err
	}
	fmt.Printf("capture latency 100-row: p50 %.2f ms  p99 %.2f ms\n", p50_100, p99_100)

	// Apply throughput: the 100-row write sets, serially, on one worker.
	ap, err := apply.Open(ctx, apply.Config{DSN: b.DSN("postgres")})
	if err != nil {
		return err
	}
	seq := uint64(0)
	began := time.Now()
	rows := 0
	for _, ws := range ws100 {
		seq++
		if _, err := ap.Apply(ctx, seq, ws); err != nil {
			return err
		}
		rows += len(ws.Rows)
	}
	applyRate := float64(rows) / time.Since(began).Seconds()
	ap.Close()

	// The same rows inserted directly: single INSERTs, and COPY.
	began = time.Now()
	tx, err := cb.Begin(ctx)
	if err != nil {
		return err
	}
	for _, ws := range ws100 {
		for _, r := range ws.Rows {
			if _, err := tx.Exec(ctx, "INSERT INTO direct VALUES ($1, $2, $3)", r.Values[0].Text, r.Values[1].Text, r.Values[2].Text); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	insertRate := float64(rows) / time.Since(began).Seconds()
	var src [][]any
	for _, ws := range ws100 {
		for _, r := range ws.Rows {
			src = append(src, []any{r.Values[0].Text, r.Values[1].Text, r.Values[2].Text})
		}
	}
	began = time.Now()
	if _, err := cb.CopyFrom(ctx, pgx.Identifier{"copied"}, []string{"id", "v", "n"}, pgx.CopyFromRows(src)); err != nil {
		return err
	}
	copyRate := float64(rows) / time.Since(began).Seconds()
	fmt.Printf("apply %.0f rows/s; single INSERTs %.0f rows/s; COPY %.0f rows/s\n", applyRate, insertRate, copyRate)

	// Parallel apply of non-conflicting 1-row write sets: 1 worker vs 4,
	// on a fresh copy of the same write sets under new seqnos and gids.
	speed := func(workers int, from uint64) (float64, error) {
		if _, err := cb.Exec(ctx, "TRUNCATE t"); err != nil {
			return 0, err
		}
		ap, err := apply.Open(ctx, apply.Config{DSN: b.DSN("postgres"), Workers: workers})
		if err != nil {
			return 0, err
		}
		defer ap.Close()
		var items []apply.Item
		for i, ws := range ws1 {
			c := *ws
			c.GID = txn.NewGID(uint32(100+workers), uint64(i))
			items = append(items, apply.Item{Seqno: from + uint64(i), WriteSet: &c})
		}
		began := time.Now()
		if err := ap.ApplyBatch(ctx, items); err != nil {
			return 0, err
		}
		return float64(len(items)) / time.Since(began).Seconds(), nil
	}
	s1, err := speed(1, 100000)
	if err != nil {
		return err
	}
	s4, err := speed(4, 200000)
	if err != nil {
		return err
	}
	fmt.Printf("parallel apply of %d one-row write sets: 1 worker %.0f ws/s, 4 workers %.0f ws/s\n", len(ws1), s1, s4)
	fmt.Printf("RESULT capture_p50_ms=%.2f apply_vs_insert=%.2f parallel_speedup=%.2f\n", p50_1, applyRate/insertRate, s4/s1)
	return nil
}
