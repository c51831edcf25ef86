package capture

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/txn"
)

// TestDDLRecordsFollowWhatCommits: the event triggers record exactly the
// DDL a prepared transaction ran and kept — nothing a savepoint rolled
// back or a failed statement attempted, DDL inside DO blocks included —
// in order, with the client's query, the tag and the objects.
func TestDDLRecordsFollowWhatCommits(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE SCHEMA IF NOT EXISTS _ordo")
	exec(t, conn, DDLTriggerSQL)
	exec(t, conn, DDLTriggerSQL) // idempotent
	t.Cleanup(func() {
		c := connect(t)
		exec(t, c, "DROP EVENT TRIGGER IF EXISTS ordo_ddl_end; DROP EVENT TRIGGER IF EXISTS ordo_ddl_dropped")
	})
	exec(t, conn, "CREATE TABLE dd0 (id int PRIMARY KEY)")
	c, _ := startCapture(t, "ddl_slot", Config{})

	gid := txn.NewGID(1, 41)
	for _, s := range []string{
		"BEGIN",
		"CREATE TABLE dd1 (id int PRIMARY KEY, c int)",
		"SAVEPOINT s",
		"ALTER TABLE dd1 ADD COLUMN x int",
		"ROLLBACK TO s",
		"SAVEPOINT s2",
	} {
		exec(t, conn, s)
	}
	// A statement that fails inside a savepoint (psql's ON_ERROR_ROLLBACK).
	_, err := conn.Exec(ctx, "ALTER TABLE dd1 ADD COLUMN c int")
	require.Error(t, err)
	for _, s := range []string{
		"ROLLBACK TO s2",
		"DO $$ BEGIN CREATE TABLE dd2 (id int PRIMARY KEY); END $$",
		"CREATE TABLE dd3 (id int PRIMARY KEY); CREATE INDEX dd3_i ON dd3 (id)",
		"DROP TABLE dd0",
		"CREATE EXTENSION pg_trgm", // one record, not one per command of its script
		"INSERT INTO dd1 VALUES (1, 1)",
	} {
		exec(t, conn, s)
	}
	exec(t, conn, "PREPARE TRANSACTION '"+string(gid)+"'")

	ws, err := c.Await(ctx, gid)
	require.NoError(t, err)
	var got [][3]string
	for _, r := range ws.DDLRecords {
		require.NotEmpty(t, r.QueryHash)
		got = append(got, [3]string{r.Tag, r.Query, describe(r.Objects)})
	}
	require.Equal(t, [][3]string{
		{"CREATE TABLE", "CREATE TABLE dd1 (id int PRIMARY KEY, c int)", "table public.dd1, index public.dd1_pkey"},
		{"CREATE TABLE", "DO $$ BEGIN CREATE TABLE dd2 (id int PRIMARY KEY); END $$", "table public.dd2, index public.dd2_pkey"},
		{"CREATE TABLE", "CREATE TABLE dd3 (id int PRIMARY KEY); CREATE INDEX dd3_i ON dd3 (id)", "table public.dd3, index public.dd3_pkey"},
		{"CREATE INDEX", "CREATE TABLE dd3 (id int PRIMARY KEY); CREATE INDEX dd3_i ON dd3 (id)", "index public.dd3_i"},
		{"DROP TABLE", "DROP TABLE dd0", ""},
		{"CREATE EXTENSION", "CREATE EXTENSION pg_trgm", "extension pg_trgm"},
	}, got)
	require.Equal(t, "table public.dd0, type public.dd0, type public.dd0[], table constraint dd0_pkey on public.dd0, index public.dd0_pkey", describe(ws.DDLDropped))
	require.Len(t, ws.Rows, 1)
	require.Contains(t, ws.DDLRecords[0].Settings, Setting{Name: "search_path", Value: "public"}, "the client's search_path, not the trigger's")
	require.Equal(t, "ordo", ws.DDLRecords[0].SessionUser)
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid)+"'")

	// A client that tampers with the setting the trigger reads makes its
	// own write set unusable, and nothing else: the next one is captured.
	forged := txn.NewGID(1, 42)
	exec(t, conn, "BEGIN")
	exec(t, conn, "SELECT set_config('ordo.ddl_last', md5('CREATE TABLE dd4 (id int PRIMARY KEY)'), true)")
	exec(t, conn, "CREATE TABLE dd4 (id int PRIMARY KEY)")
	exec(t, conn, "PREPARE TRANSACTION '"+string(forged)+"'")
	_, err = c.Await(ctx, forged)
	require.ErrorContains(t, err, "repeats a query")
	exec(t, conn, "ROLLBACK PREPARED '"+string(forged)+"'")
	next := txn.NewGID(1, 43)
	prepared(t, conn, next, "CREATE TABLE dd5 (id int PRIMARY KEY)")
	ws, err = c.Await(ctx, next)
	require.NoError(t, err)
	require.Len(t, ws.DDLRecords, 1)
	exec(t, conn, "ROLLBACK PREPARED '"+string(next)+"'")
}

func describe(objs []DDLObject) string {
	s := ""
	for _, o := range objs {
		if strings.Contains(o.Identity, "_not_null on ") {
			continue // PostgreSQL 18 and later: NOT NULL constraints are objects of their own
		}
		if s != "" {
			s += ", "
		}
		s += o.Type + " " + o.Identity
	}
	return s
}

// TestDDLRecordsSayWhereTheyRan: each record counts the rows the
// transaction changed before its command ran; a command that writes its
// own rows (CREATE TABLE AS, SELECT INTO) counts none of them, nor the
// rows since the record before it.
func TestDDLRecordsSayWhereTheyRan(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE SCHEMA IF NOT EXISTS _ordo")
	exec(t, conn, DDLTriggerSQL)
	t.Cleanup(func() {
		c := connect(t)
		exec(t, c, "DROP EVENT TRIGGER IF EXISTS ordo_ddl_end; DROP EVENT TRIGGER IF EXISTS ordo_ddl_dropped")
	})
	exec(t, conn, "CREATE TABLE wr0 (id int PRIMARY KEY, old int, new int)")
	exec(t, conn, "INSERT INTO wr0 VALUES (1, 1, NULL), (2, 2, NULL)")
	c, _ := startCapture(t, "ddl_at_slot", Config{})
	gid := txn.NewGID(1, 51)
	exec(t, conn, "BEGIN")
	for _, s := range []string{
		"UPDATE wr0 SET new = old",                     // rows 0, 1
		"ALTER TABLE wr0 DROP COLUMN old",              // after 2
		"INSERT INTO wr0 VALUES (3, 3)",                // row 2
		"CREATE TABLE wr1 AS SELECT * FROM wr0",        // after 2 (the record before): its rows 3-5 follow it
		"SELECT id INTO wr2 FROM wr0 WHERE id = 1",     // after 2 too: its row 6 follows it
		"ALTER TABLE wr1 RENAME COLUMN new TO renamed", // after 7
	} {
		exec(t, conn, s)
	}
	exec(t, conn, "PREPARE TRANSACTION '"+string(gid)+"'")
	ws, err := c.Await(ctx, gid)
	require.NoError(t, err)
	var got []string
	for _, r := range ws.DDLRecords {
		got = append(got, fmt.Sprintf("%s after %d", r.Tag, r.RowsBefore))
	}
	require.Equal(t, []string{"ALTER TABLE after 2", "CREATE TABLE AS after 2", "SELECT INTO after 2", "ALTER TABLE after 7"}, got)
	require.Len(t, ws.Rows, 7)
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid)+"'")
}
