package schemacheck

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/sequences"
)

var pg *pglocal.Cluster

func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		pg, err = pglocal.Start(context.Background(), pglocal.Options{N: 2})
		if err != nil {
			panic(err)
		}
		defer pg.Stop()
		return m.Run()
	}())
}

func TestFingerprintNamesTheObjectsThatDiffer(t *testing.T) {
	ctx := context.Background()
	var conns []*pgx.Conn
	for _, s := range pg.Servers {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(ctx) })
		conns = append(conns, c)
	}
	schema := `CREATE SCHEMA app;
		CREATE TYPE app.mood AS ENUM ('ok', 'great');
		CREATE TABLE app.t (id serial PRIMARY KEY, name text NOT NULL DEFAULT 'x', mood app.mood, CHECK (length(name) < 100));
		CREATE INDEX t_name ON app.t (name);
		CREATE VIEW app.v AS SELECT id FROM app.t;
		CREATE FUNCTION app.f(int) RETURNS int LANGUAGE sql AS 'SELECT $1 + 1';
		CREATE SEQUENCE app.free;`
	for i, c := range conns {
		_, err := c.Exec(ctx, schema)
		require.NoError(t, err)
		// Sequences are normalized differently on every node: that is
		// not a difference.
		_, err = c.Exec(ctx, sequences.NormalizeSQL(100, i+1))
		require.NoError(t, err)
	}
	a, err := Fingerprint(ctx, conns[0])
	require.NoError(t, err)
	b, err := Fingerprint(ctx, conns[1])
	require.NoError(t, err)
	require.Equal(t, a.Hash, b.Hash, "identical schemas: %v", Diff(a, b))
	require.Contains(t, a.Objects, "table app.t")
	require.Contains(t, a.Objects, "index app.t_name")
	require.Contains(t, a.Objects, "function app.f(integer)")

	_, err = conns[1].Exec(ctx, `ALTER TABLE app.t ADD COLUMN extra int;
		DROP INDEX app.t_name;
		CREATE OR REPLACE FUNCTION app.f(int) RETURNS int LANGUAGE sql AS 'SELECT $1 + 2';
		ALTER TYPE app.mood ADD VALUE 'meh';
		CREATE TABLE app.only_b (id int)`)
	require.NoError(t, err)
	b, err = Fingerprint(ctx, conns[1])
	require.NoError(t, err)
	require.NotEqual(t, a.Hash, b.Hash)
	require.Equal(t, []Difference{
		{"function app.f(integer)", "different definition"},
		{"index app.t_name", "only here"},
		{"table app.only_b", "missing here"},
		{"table app.t", "different definition"},
		{"type app.mood", "different definition"},
	}, Diff(a, b))
}

// TestFingerprintDoesNotWaitForAPreparedSchemaChange: a prepared
// transaction that alters a table holds its lock until the node decides
// it, and the node may be waiting for this fingerprint first. The table,
// its indexes and the views over it are reported Unreadable at once, and
// Diff does not take them for differences.
func TestFingerprintDoesNotWaitForAPreparedSchemaChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, pg.Servers[0].DSN("postgres"))
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `CREATE SCHEMA held;
		CREATE TABLE held.t (id int PRIMARY KEY, n int DEFAULT 1 CHECK (n > 0));
		CREATE INDEX t_n ON held.t (n);
		CREATE VIEW held.v AS SELECT id FROM held.t;
		CREATE TABLE held.free (id int PRIMARY KEY, n int DEFAULT 2)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "ROLLBACK PREPARED 'held'")
		_, _ = c.Exec(context.Background(), "DROP SCHEMA held CASCADE")
	})
	before, err := Fingerprint(ctx, c)
	require.NoError(t, err)

	other, err := pgx.Connect(ctx, pg.Servers[0].DSN("postgres"))
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = other.Exec(ctx, "BEGIN; ALTER TABLE held.t ADD COLUMN extra int; PREPARE TRANSACTION 'held'")
	require.NoError(t, err)

	_, err = c.Exec(ctx, "SET lock_timeout = '5s'")
	require.NoError(t, err)
	began := time.Now()
	during, err := Fingerprint(ctx, c)
	require.NoError(t, err)
	require.Less(t, time.Since(began), 4*time.Second, "the fingerprint waited for the prepared transaction's lock")
	for _, o := range []string{"table held.t", "index held.t_pkey", "index held.t_n", "view held.v"} {
		require.Equal(t, Unreadable, during.Objects[o], o)
	}
	require.Equal(t, before.Objects["table held.free"], during.Objects["table held.free"])
	require.NotEqual(t, before.Hash, during.Hash)
	require.Empty(t, Diff(before, during), "an unreadable object is no difference")
	require.Empty(t, Diff(during, before), "an unreadable object is no difference")
	delete(before.Objects, "view held.v")
	require.Equal(t, []Difference{{"view held.v", "only here"}}, Diff(during, before), "an unreadable object still exists")
}

// TestFingerprintDoesNotQueueBehindAWaitingSchemaChange: a schema change
// waiting for a prepared transaction's lock makes every later reader of
// the table queue behind it; the fingerprint reports the table Unreadable
// instead of timing out on it.
func TestFingerprintDoesNotQueueBehindAWaitingSchemaChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, pg.Servers[0].DSN("postgres"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	c, holder, alter := connect(), connect(), connect()
	_, err := c.Exec(ctx, `CREATE SCHEMA queued; CREATE TABLE queued.t (id int PRIMARY KEY, n int DEFAULT 1)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "ROLLBACK PREPARED 'queued'")
		_, _ = c.Exec(context.Background(), "DROP SCHEMA queued CASCADE")
	})
	_, err = holder.Exec(ctx, "BEGIN; INSERT INTO queued.t VALUES (1); PREPARE TRANSACTION 'queued'")
	require.NoError(t, err)
	altered := make(chan error, 1)
	go func() {
		_, err := alter.Exec(ctx, "ALTER TABLE queued.t ADD COLUMN extra int")
		altered <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'queued.t'::regclass AND NOT granted)`).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 10*time.Millisecond, "the ALTER waits for the prepared transaction")

	_, err = c.Exec(ctx, "SET lock_timeout = '50ms'")
	require.NoError(t, err)
	snap, err := Fingerprint(ctx, c)
	require.NoError(t, err)
	require.Equal(t, Unreadable, snap.Objects["table queued.t"])

	_, err = c.Exec(ctx, "ROLLBACK PREPARED 'queued'")
	require.NoError(t, err)
	require.NoError(t, <-altered)
}
