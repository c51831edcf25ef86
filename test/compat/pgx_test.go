package compat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestPgx(t *testing.T) {
	out := same(t, func(t *testing.T, tg target) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var sb strings.Builder
		c, err := pgx.Connect(ctx, tg.dsn())
		if err != nil {
			t.Fatalf("%s: %v", tg.name, err)
		}
		defer c.Close(ctx)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
		}
		// Simple protocol, multi-statement.
		_, err = c.Exec(ctx, "CREATE TABLE acct(id int PRIMARY KEY, owner text, bal bigint); INSERT INTO acct VALUES (1,'ann',100),(2,'bob',50)", pgx.QueryExecModeSimpleProtocol)
		must(err)
		// Extended with every exec mode.
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
			var owner string
			var bal int64
			must(c.QueryRow(ctx, "SELECT owner, bal FROM acct WHERE id = $1", mode, 1).Scan(&owner, &bal))
			fmt.Fprintf(&sb, "mode %d: %s %d\n", mode, owner, bal)
		}
		// Batch (pipeline).
		b := &pgx.Batch{}
		b.Queue("UPDATE acct SET bal = bal - $1 WHERE id = 1", 30)
		b.Queue("UPDATE acct SET bal = bal + $1 WHERE id = 2", 30)
		b.Queue("SELECT sum(bal) FROM acct")
		br := c.SendBatch(ctx, b)
		for i := 0; i < 2; i++ {
			tag, err := br.Exec()
			must(err)
			fmt.Fprintf(&sb, "batch %d: %s\n", i, tag)
		}
		var sum int64
		must(br.QueryRow().Scan(&sum))
		must(br.Close())
		fmt.Fprintf(&sb, "batch sum %d\n", sum)
		// COPY in and out.
		n, err := c.CopyFrom(ctx, pgx.Identifier{"acct"}, []string{"id", "owner", "bal"},
			pgx.CopyFromSlice(1000, func(i int) ([]any, error) { return []any{i + 10, fmt.Sprintf("o%d", i), int64(i)}, nil }))
		must(err)
		var buf strings.Builder
		tag, err := c.PgConn().CopyTo(ctx, &buf, "COPY (SELECT * FROM acct WHERE id < 13 ORDER BY id) TO STDOUT")
		must(err)
		fmt.Fprintf(&sb, "copied %d, out %s:\n%s", n, tag, buf.String())
		// LISTEN/NOTIFY across two sessions.
		c2, err := pgx.Connect(ctx, tg.dsn())
		must(err)
		defer c2.Close(ctx)
		_, err = c.Exec(ctx, "LISTEN pgx_chan")
		must(err)
		_, err = c2.Exec(ctx, "NOTIFY pgx_chan, 'from c2'")
		must(err)
		note, err := c.WaitForNotification(ctx)
		must(err)
		fmt.Fprintf(&sb, "notification %s %q from other backend: %v\n", note.Channel, note.Payload, note.PID != c.PgConn().PID())
		// Cancel.
		qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		_, err = c2.Exec(qctx, "SELECT pg_sleep(20)")
		qcancel()
		var pe *pgconn.PgError
		fmt.Fprintf(&sb, "cancel: canceled=%v fast=%v\n", errors.As(err, &pe) && pe.Code == "57014" || errors.Is(err, context.DeadlineExceeded), time.Since(start) < 5*time.Second)
		// Errors relayed verbatim.
		_, err = c.Exec(ctx, "INSERT INTO acct VALUES (1, 'dup', 0)")
		if errors.As(err, &pe) {
			fmt.Fprintf(&sb, "error %s %s %s %s\n", pe.Code, pe.ConstraintName, pe.TableName, pe.Message)
		}
		return sb.String()
	})
	for _, want := range []string{"batch sum 150", "copied 1000", "notification pgx_chan \"from c2\" from other backend: true",
		"cancel: canceled=true fast=true", "error 23505 acct_pkey acct"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
