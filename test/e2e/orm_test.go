package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSQLAlchemyORMWorkload runs an ordinary SQLAlchemy 2.0 application,
// unmodified, through two nodes of a cluster (testdata/orm_sqlalchemy.py):
// schema from the models (create_all), related objects added in one
// session, a nested transaction (savepoint) that fails inside one that
// commits, an executemany batch, eager loading, an ORM update with a row
// lock, the same row incremented through both nodes at once with retries
// on 40001, and a delete that cascades. Every step's result is checked,
// and every node ends with the same rows.
func TestSQLAlchemyORMWorkload(t *testing.T) {
	t.Parallel()
	path := alembicPath(t) // SQLAlchemy and psycopg 3, pinned beside Alembic
	for _, protocol := range []string{"dbsm-rc", "dbsm-si"} {
		t.Run(protocol, func(t *testing.T) {
			c := startCluster(t, 3, protocol)
			url := func(i int) string { return strings.Replace(c.dsn(i), "postgres://", "postgresql+psycopg://", 1) }
			cmd := exec.Command("python3", filepath.Join("testdata", "orm_sqlalchemy.py"), url(0), url(1))
			cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
			b, err := cmd.CombinedOutput()
			out := string(b)
			require.NoError(t, err, out)
			t.Logf("workload:\n%s", out)
			for _, want := range []string{
				"schema created", "authors 5 books 20", "savepoint rolled back 23505", "authors after the savepoint 7",
				"tags 50", "restocked 4", "sold, stock 4", "concurrent increments done", "authors 6 books 16",
			} {
				require.Contains(t, out, want+"\n")
			}
			c.waitConverged()
			for _, table := range []string{"author", "book", "tag"} {
				sum := c.checksum(0, table)
				for i := 1; i < 3; i++ {
					require.Equal(t, sum, c.checksum(i, table), "table %s on node %d", table, i+1)
				}
			}
			for i := range c.nodes {
				require.Zero(t, c.unreplicated(i), "node %d", i+1)
				var stock int
				require.NoError(t, c.direct(i).QueryRow(context.Background(), "SELECT stock FROM book WHERE title = 'book 3.3'").Scan(&stock))
				require.Equal(t, 5+60, stock, "node %d: every increment through both nodes kept", i+1)
			}
		})
	}
}
