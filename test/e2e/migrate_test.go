package e2e

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", as applications use it
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/test/internal/pyenv"
)

// TestGooseMigrationsThroughOneNode applies a migration history with a
// real Go migration library through node 1 (each migration is a
// transaction mixing DDL and rows), then one that fails halfway: it is
// rolled back everywhere and every node's schema is the same after each.
func TestGooseMigrationsThroughOneNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	db, err := sql.Open("pgx", c.dsn(0))
	require.NoError(t, err)
	defer db.Close()

	history := fstest.MapFS{
		"00001_users.sql": {Data: []byte(`-- +goose Up
CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL UNIQUE);
-- +goose Down
DROP TABLE users;
`)},
		"00002_seed_and_column.sql": {Data: []byte(`-- +goose Up
INSERT INTO users (email) VALUES ('a@example.com'), ('b@example.com');
ALTER TABLE users ADD COLUMN created_at timestamptz NOT NULL DEFAULT '2026-01-01';
UPDATE users SET created_at = '2026-02-02' WHERE email = 'b@example.com';
-- +goose Down
ALTER TABLE users DROP COLUMN created_at;
`)},
		"00003_orders.sql": {Data: []byte(`-- +goose Up
CREATE TABLE orders (id bigserial PRIMARY KEY, user_id int NOT NULL REFERENCES users (id), total numeric(12,2));
CREATE INDEX orders_user ON orders (user_id);
INSERT INTO orders (user_id, total) SELECT id, 9.99 FROM users;
-- +goose Down
DROP TABLE orders;
`)},
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, history)
	require.NoError(t, err)
	results, err := provider.Up(ctx)
	require.NoError(t, err)
	require.Len(t, results, 3)

	c.waitConverged()
	fp := c.schemaFingerprint(0)
	for i := 1; i < 3; i++ {
		require.Equal(t, fp, c.schemaFingerprint(i), "node %d's schema differs after the migrations", i+1)
		for _, table := range []string{"users", "orders", "goose_db_version"} {
			require.Equal(t, c.checksum(0, table), c.checksum(i, table), "%s differs on node %d", table, i+1)
		}
	}

	// A migration that fails halfway changes nothing anywhere.
	history["00004_broken.sql"] = &fstest.MapFile{Data: []byte(`-- +goose Up
CREATE TABLE audit (id int PRIMARY KEY);
INSERT INTO audit VALUES (1);
INSERT INTO no_such_table VALUES (1);
-- +goose Down
DROP TABLE audit;
`)}
	provider, err = goose.NewProvider(goose.DialectPostgres, db, history)
	require.NoError(t, err)
	_, err = provider.Up(ctx)
	require.Error(t, err, "the broken migration must fail")
	c.waitConverged()
	for i := 0; i < 3; i++ {
		require.Equal(t, fp, c.schemaFingerprint(i), "node %d's schema changed after a failed migration", i+1)
		var audit int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'audit'").Scan(&audit))
		require.Zero(t, audit)
		require.Zero(t, c.unreplicated(i))
	}
	version, err := provider.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), version)
}

const (
	alembicVersion    = "1.13.3"
	sqlalchemyVersion = "2.0.36"
	psycopgVersion    = "3.2.3"
)

// alembicPath returns a PYTHONPATH with Alembic, SQLAlchemy and psycopg 3,
// installed from PyPI into the test cache if needed (a failed install
// fails the test).
func alembicPath(t *testing.T) string {
	return pyenv.Install(t, "import alembic, sqlalchemy, psycopg; assert alembic.__version__ == '"+alembicVersion+
		"' and sqlalchemy.__version__ == '"+sqlalchemyVersion+"' and psycopg.__version__ == '"+psycopgVersion+"'",
		"alembic=="+alembicVersion, "sqlalchemy=="+sqlalchemyVersion, "psycopg[binary]=="+psycopgVersion)
}

// TestAlembicMigrationsThroughOneNode does the same with Alembic
// (SQLAlchemy over psycopg 3), which runs the whole history in one
// transaction.
func TestAlembicMigrationsThroughOneNode(t *testing.T) {
	t.Parallel()
	path := alembicPath(t)
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	url := strings.Replace(c.dsn(0), "postgres://", "postgresql+psycopg://", 1)
	run := func(args ...string) (string, error) {
		cmd := exec.Command("python3", append([]string{filepath.Join("testdata", "alembic", "migrate.py"), url}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("head")
	require.NoError(t, err, out)
	c.waitConverged()
	fp := c.schemaFingerprint(0)
	for i := 1; i < 3; i++ {
		require.Equal(t, fp, c.schemaFingerprint(i), "node %d's schema differs", i+1)
		require.Equal(t, c.checksum(0, "accounts"), c.checksum(i, "accounts"))
		require.Equal(t, c.checksum(0, "alembic_version"), c.checksum(i, "alembic_version"))
	}
	out, err = run("head", "--broken")
	require.Error(t, err, "the broken migration must fail: %s", out)
	require.Contains(t, out, "FAILED")
	c.waitConverged()
	for i := 0; i < 3; i++ {
		require.Equal(t, fp, c.schemaFingerprint(i), "node %d's schema changed after a failed migration", i+1)
		var version string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT version_num FROM alembic_version").Scan(&version))
		require.Equal(t, "r2", version)
		require.Zero(t, c.unreplicated(i))
	}
}

// TestPsycopgThroughTheCluster writes with psycopg 3 through node 1
// (autocommit, transaction, pipeline mode, COPY) and reads the rows on the
// other nodes.
func TestPsycopgThroughTheCluster(t *testing.T) {
	t.Parallel()
	path := alembicPath(t) // carries psycopg 3
	c := startCluster(t, 3, "dbsm-si")
	cmd := exec.Command("python3", filepath.Join("testdata", "psycopg_cluster.py"), c.dsn(0))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "rows 107")
	c.waitConverged()
	for i := range c.nodes {
		var n int
		require.NoError(t, c.direct(i).QueryRow(context.Background(), "SELECT count(*) FROM py").Scan(&n))
		require.Equal(t, 107, n, "node %d", i+1)
		require.Zero(t, c.unreplicated(i), "node %d", i+1)
	}
	require.Equal(t, c.checksum(0, "py"), c.checksum(2, "py"))
}
