package catalog

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ordo-db/ordo/internal/pglocal"
)

// dsn is the DSN of the real PostgreSQL server TestMain starts.
var dsn string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{N: 1})
		if err != nil {
			fmt.Fprintln(os.Stderr, "catalog tests need PostgreSQL:", err)
			return 1
		}
		defer c.Stop()
		dsn = c.Servers[0].DSN("postgres")
		return m.Run()
	}())
}
