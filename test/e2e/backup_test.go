package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDumpAndRestoreThroughNodes: pg_dump through a node (custom,
// directory with parallel jobs on an exported snapshot, plain), without
// Ordo's own objects as docs/backups.md says, restores through any node
// with pg_restore, pg_restore -j and psql -1 with no error, onto every
// node; every node's sequences then hand out ids clear of the restored
// ones (the dump's setval(…, false) was once dropped, and a node handed
// out restored ids). A dump with Ordo's
// objects restores the data too, and its attempts to write Ordo's
// bookkeeping are refused by Ordo, not left to a duplicate key.
func TestDumpAndRestoreThroughNodes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := func(name string, args ...string) (string, error) {
		// The servers' own version of the tool: pg_dump refuses a newer
		// server.
		out, err := exec.CommandContext(ctx, filepath.Join(c.pg.BinDir, name), args...).CombinedOutput()
		return string(out), err
	}
	must := func(name string, args ...string) {
		out, err := run(name, args...)
		require.NoError(t, err, "%s %v: %s", name, args, out)
	}
	for _, q := range []string{
		"CREATE TABLE branch (id int PRIMARY KEY, name text)",
		"CREATE TABLE account (id int PRIMARY KEY, branch int NOT NULL REFERENCES branch, balance numeric(12, 2))",
		"INSERT INTO branch SELECT g, 'b' || g FROM generate_series(1, 10) g",
		"INSERT INTO account SELECT g, g % 10 + 1, g * 1.5 FROM generate_series(1, 10000) g",
		"CREATE SCHEMA extra",
		"CREATE TABLE extra.items (id bigserial PRIMARY KEY, name text UNIQUE, tags text[], doc jsonb)",
		"INSERT INTO extra.items (name, tags, doc) SELECT 'n' || g, ARRAY['a', 'b'], jsonb_build_object('g', g) FROM generate_series(1, 2000) g",
		"CREATE MATERIALIZED VIEW extra.mv AS SELECT id, name FROM extra.items WHERE id < 100",
		"CREATE FUNCTION extra.f(i int) RETURNS int LANGUAGE sql AS 'SELECT i + 1'",
		"CREATE INDEX ON extra.items USING gin (tags)",
		"SELECT lo_from_bytea(0, 'large object bytes')",
	} {
		_, err := c.connect(0).Exec(ctx, q)
		require.NoError(t, err, q)
	}
	c.waitConverged()
	tables := []string{"branch", "account", "extra.items", "extra.mv",
		"(SELECT lo_get(oid) FROM pg_largeobject_metadata)"}
	want := map[string]string{}
	for _, tbl := range tables {
		want[tbl] = c.checksum(0, tbl)
	}
	dropAll := func() {
		_, err := c.connect(2).Exec(ctx, "DROP SCHEMA extra CASCADE; DROP TABLE account, branch; SELECT lo_unlink(oid) FROM pg_largeobject_metadata")
		require.NoError(t, err)
		c.waitConverged()
	}
	check := func(what string) {
		c.waitConverged()
		for _, tbl := range tables {
			for i := range c.nodes {
				require.Equal(t, want[tbl], c.checksum(i, tbl), "%s: %s on node %d", what, tbl, i+1)
			}
		}
		for i := range c.nodes {
			require.Zero(t, c.unreplicated(i), what)
			// Each node goes on in its own class, clear of every
			// restored id (sequences.md), where the dump's setval put it.
			var id int64
			require.NoError(t, c.connect(i).QueryRow(ctx, "INSERT INTO extra.items (name) VALUES ($1) RETURNING id", what+string(rune('a'+i))).Scan(&id),
				"%s: node %d", what, i+1)
			require.EqualValues(t, i+1, id%100, "%s: node %d's class", what, i+1)
			_, err := c.connect(i).Exec(ctx, "DELETE FROM extra.items WHERE id = $1", id)
			require.NoError(t, err)
		}
		c.waitConverged()
	}

	dir := t.TempDir()
	clean := []string{"--exclude-schema=_ordo", "--no-publications"}
	must("pg_dump", append(clean, "-Fc", "-f", filepath.Join(dir, "db.dump"), c.dsn(1))...)
	must("pg_dump", append(clean, "-Fd", "-j", "2", "-f", filepath.Join(dir, "dbdir"), c.dsn(1))...)
	must("pg_dump", append(clean, "-Fp", "-f", filepath.Join(dir, "db.sql"), c.dsn(1))...)
	must("pg_dump", "-Fc", "-f", filepath.Join(dir, "whole.dump"), c.dsn(1))

	dropAll()
	must("pg_restore", "--exit-on-error", "-d", c.dsn(2), filepath.Join(dir, "db.dump"))
	check("pg_restore")
	dropAll()
	must("pg_restore", "--exit-on-error", "-j", "2", "-d", c.dsn(0), filepath.Join(dir, "dbdir"))
	check("pg_restore -j 2")
	dropAll()
	must("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-f", filepath.Join(dir, "db.sql"), c.dsn(1))
	check("psql -1")

	// The whole dump: Ordo's objects in it are refused, the rest restores.
	dropAll()
	out, err := run("pg_restore", "-d", c.dsn(2), filepath.Join(dir, "whole.dump"))
	require.Error(t, err, "pg_restore reports the refused objects: %s", out)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, "pg_restore: error:") && !strings.Contains(line, "is Ordo's own") {
			t.Errorf("an error other than Ordo's refusal: %s", line)
		}
	}
	require.Contains(t, out, "_ordo.applied is Ordo's own")
	check("pg_restore of a whole dump")
}
