package e2e

import (
	"context"
	"database/sql"
	"testing"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", as applications use it
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
)

// TestGooseMigrationsThroughOneNode applies a migration history with a
// real Go migration library through node 1 (each migration is a
// transaction mixing DDL and rows), then one that fails halfway: it is
// rolled back everywhere and every node's schema is the same after each.
func TestGooseMigrationsThroughOneNode(t *testing.T) {
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
