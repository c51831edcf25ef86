package analysis

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ordo-db/ordo/internal/pglocal"
)

// dsn is the DSN of the real PostgreSQL server TestMain starts for the
// tests that compare with PostgreSQL (canonical values, the live catalog).
var dsn string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		if !wantsPostgres() {
			return m.Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{N: 1})
		if err != nil {
			fmt.Fprintln(os.Stderr, "analysis tests need PostgreSQL:", err)
			return 1
		}
		defer c.Stop()
		dsn = c.Servers[0].DSN("postgres")
		return m.Run()
	}())
}

// wantsPostgres is false only when the run selects nothing that needs the
// server (benchmarks with -run=^$, fuzzing), so those do not pay for it.
func wantsPostgres() bool {
	r := flag.Lookup("test.run")
	fz := flag.Lookup("test.fuzz")
	if fz != nil && fz.Value.String() != "" {
		return false
	}
	return r == nil || r.Value.String() != "^$"
}
