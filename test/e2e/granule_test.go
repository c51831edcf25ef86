package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/ctl"
)

// TestGranulesOfSplitClasses: under dbsm and pgr, the split conflict
// classes (TPC-C's warehouse) are granules of certification keys. A read
// that fixes the warehouse reads that granule, not the whole table, and a
// write takes IX on its row's granule: a concurrent update of another
// warehouse no longer aborts the reader (it did: the read was of the
// whole table), one of the same warehouse still does, and a transaction
// whose snapshot predates the change of the classes aborts rather than mix
// two configurations.
func TestGranulesOfSplitClasses(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm", "pgr"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel() // separate clusters
			c := startCluster(t, 3, protocol)
			ctx := context.Background()
			for _, sql := range []string{
				"CREATE TABLE stock (w int, i int, qty int NOT NULL, PRIMARY KEY (w, i))",
				"CREATE TABLE report (id serial PRIMARY KEY, w int, total int)",
				"INSERT INTO stock SELECT w, i, 10 FROM generate_series(1, 3) w, generate_series(1, 5) i",
			} {
				_, err := c.connect(0).Exec(ctx, sql)
				require.NoError(t, err, sql)
			}
			c.waitConverged()
			a, b := c.connect(0), c.connect(1)
			// report reads warehouse w's stock and writes a report row;
			// meanwhile node 2 updates an item of warehouse other.
			round := func(w, other int) error {
				tx, err := a.Begin(ctx)
				require.NoError(t, err)
				var total int
				require.NoError(t, tx.QueryRow(ctx, "SELECT sum(qty) FROM stock WHERE w = $1", w).Scan(&total))
				_, err = tx.Exec(ctx, "INSERT INTO report (w, total) VALUES ($1, $2)", w, total)
				require.NoError(t, err)
				_, err = b.Exec(ctx, "UPDATE stock SET qty = qty + 1 WHERE w = $1 AND i = 3", other)
				require.NoError(t, err)
				c.waitConverged()
				return tx.Commit(ctx)
			}
			require.Equal(t, "40001", sqlstate(round(1, 2)), "without classes the read is of the whole table")

			file := filepath.Join(t.TempDir(), "classes.yaml")
			require.NoError(t, os.WriteFile(file, []byte("classes:\n  - {name: stock, tables: [public.stock], label: w, columns: {public.stock: w}}\n"), 0o644))
			out, errOut, code := buildOrdoctl(t).run("classes", "apply", "-f", file, "--data-dir", c.cfgs[0].DataDir)
			require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
			c.waitConverged()

			require.NoError(t, round(1, 2), "another warehouse's update does not conflict with a read of warehouse 1")
			err := round(1, 1)
			require.Error(t, err, "an update of warehouse 1 conflicts with its read")
			require.Equal(t, "40001", sqlstate(err), "%v", err)

			// A lock of a whole warehouse conflicts with a lock of one of
			// its rows through another node (a row lock records no
			// granule key, so the warehouse lock counts for the table).
			lock := func(conn *pgx.Conn, where string) pgx.Tx {
				tx, err := conn.Begin(ctx)
				require.NoError(t, err)
				rows, err := tx.Query(ctx, "SELECT qty FROM stock WHERE "+where+" FOR UPDATE")
				require.NoError(t, err)
				rows.Close()
				_, err = tx.Exec(ctx, "INSERT INTO report (w, total) VALUES (2, 0)")
				require.NoError(t, err)
				return tx
			}
			t1, t2 := lock(a, "w = 2"), lock(b, "w = 2 AND i = 1")
			require.NoError(t, t1.Commit(ctx))
			err = t2.Commit(ctx)
			require.Error(t, err, "two nodes both locked stock (2, 1)")
			require.Equal(t, "40001", sqlstate(err), "%v", err)

			// Started before the classes changed: aborts rather than mix.
			tx, err := a.Begin(ctx)
			require.NoError(t, err)
			var total int
			require.NoError(t, tx.QueryRow(ctx, "SELECT sum(qty) FROM stock WHERE w = 3").Scan(&total))
			require.NoError(t, os.WriteFile(file, []byte("classes:\n  - {name: stock, tables: [public.stock], label: i, columns: {public.stock: i}}\n"), 0o644))
			out, errOut, code = buildOrdoctl(t).run("classes", "apply", "-f", file, "--data-dir", c.cfgs[1].DataDir)
			require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
			c.waitConverged()
			_, err = tx.Exec(ctx, "INSERT INTO report (w, total) VALUES (3, $1)", total)
			require.NoError(t, err)
			err = tx.Commit(ctx)
			require.Error(t, err)
			require.Equal(t, "40001", sqlstate(err), "%v", err)
			require.Contains(t, err.Error(), "granule columns")

			c.waitConverged()
			sum := c.checksum(0, "report")
			for i := range c.nodes {
				require.Equal(t, sum, c.checksum(i, "report"), "node %d", i+1)
				require.Equal(t, c.checksum(0, "stock"), c.checksum(i, "stock"), "node %d", i+1)
			}
		})
	}
}
