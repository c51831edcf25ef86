package e2e

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestReplayedDDLKeepsItsPrivileges: DDL an unprivileged role runs
// through one node is replayed on the others as that role, never as the
// superuser Ordo applies with: every object has the same owner on every
// node, and a block that checks its privileges takes the same branch
// everywhere (it used to run as superuser on the other nodes).
func TestReplayedDDLKeepsItsPrivileges(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	admin := c.connect(0)
	for _, sql := range []string{
		"CREATE ROLE app LOGIN PASSWORD 'app'",
		"GRANT CREATE ON SCHEMA public TO app",
	} {
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	cfg, err := pgx.ParseConfig(c.dsn(1))
	require.NoError(t, err)
	cfg.User, cfg.Password = "app", "app"
	app, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer app.Close(ctx)
	for _, sql := range []string{
		"CREATE TABLE owned (id int PRIMARY KEY)",
		"CREATE FUNCTION owned_fn() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'",
		`DO $$ BEGIN
			CREATE TABLE owned_too (id int PRIMARY KEY);
			IF current_setting('is_superuser') = 'on' THEN CREATE TABLE escalated (id int PRIMARY KEY); END IF;
		END $$`,
	} {
		_, err := app.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	for i := range c.nodes {
		var owners string
		require.NoError(t, c.direct(i).QueryRow(ctx, `SELECT string_agg(o, ' ' ORDER BY o) FROM (
			SELECT relname || ':' || pg_get_userbyid(relowner) AS o FROM pg_class WHERE relname IN ('owned', 'owned_too', 'escalated')
			UNION ALL SELECT proname || ':' || pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'owned_fn') s`).Scan(&owners))
		require.Equal(t, "owned:app owned_fn:app owned_too:app", owners, "node %d", i+1)
		require.NoError(t, c.nodes[i].Replica().Err())
	}
}
