package session

import (
	"crypto/md5"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
)

func rec(query, tag string, objs ...capture.DDLObject) capture.DDLRecord {
	sum := md5.Sum([]byte(query))
	return capture.DDLRecord{Query: query, QueryHash: hex.EncodeToString(sum[:]), Tag: tag, Objects: objs}
}

func atRows(r capture.DDLRecord, n int) capture.DDLRecord { r.RowsBefore = n; return r }

func noop(r capture.DDLRecord) capture.DDLRecord { r.NoOp = true; return r }

func stmt(sql, sent string) ddlStmt { return ddlStmt{sql: sql, sent: sent, seen: true} }

func table(schema, name string) capture.DDLObject {
	return capture.DDLObject{Type: "table", Schema: schema, Identity: schema + "." + name}
}

// TestJoinDDL: what is replicated is what the event triggers prove ran.
func TestJoinDDL(t *testing.T) {
	add := "alter table sp add column c int"
	ins := "insert into sp values (1, 1)"
	for _, tc := range []struct {
		name    string
		stmts   []ddlStmt
		records []capture.DDLRecord
		rows    bool
		blocks  map[string]blockRuns
		ddl     []string
		keys    []txn.Key
		at      []int // rowsBefore, when the case says
		err     string
	}{{
		name: "each statement is replayed after the rows changed before it ran",
		stmts: []ddlStmt{stmt("alter table a drop column x", "alter table a drop column x"), {sql: "grant select on a to r", sent: "grant select on a to r"},
			stmt("drop table b", "update a set y = 1; drop table b")},
		records: []capture.DDLRecord{
			atRows(rec("alter table a drop column x", "ALTER TABLE", table("public", "a")), 3),
			atRows(rec("update a set y = 1; drop table b", "DROP TABLE", table("public", "b")), 5)},
		rows: true,
		ddl:  []string{"alter table a drop column x", "grant select on a to r", "drop table b"},
		keys: []txn.Key{txn.TableKey("public", "a"), txn.TableKey("public", "b")},
		at:   []int{3, 3, 5},
	}, {
		name:  "a statement rolled back to a savepoint is not replayed",
		stmts: []ddlStmt{stmt(add, add)},
		rows:  true,
	}, {
		name:    "kept statements are, with the keys of what they touched",
		stmts:   []ddlStmt{stmt("create table a (id int)", "create table a (id int)"), stmt(add, add), stmt("create table b (id int)", "create table b (id int)")},
		records: []capture.DDLRecord{rec("create table a (id int)", "CREATE TABLE", table("public", "a")), rec("create table b (id int)", "CREATE TABLE", table("public", "b"))},
		ddl:     []string{"create table a (id int)", "create table b (id int)"},
		keys:    []txn.Key{txn.TableKey("public", "a"), txn.TableKey("public", "b")},
	}, {
		name:    "the same text retried after a failure is replayed once",
		stmts:   []ddlStmt{stmt(add, add), stmt(add, add)},
		records: []capture.DDLRecord{rec(add, "ALTER TABLE", table("public", "sp"))},
		ddl:     []string{add},
		keys:    []txn.Key{txn.TableKey("public", "sp")},
	}, {
		name:  "several statements of one query string",
		stmts: []ddlStmt{stmt("create table c (id int)", "create table c (id int); create index on c (id)"), stmt("create index on c (id)", "create table c (id int); create index on c (id)")},
		records: []capture.DDLRecord{rec("create table c (id int); create index on c (id)", "CREATE TABLE", table("public", "c")),
			rec("create table c (id int); create index on c (id)", "CREATE INDEX", capture.DDLObject{Type: "index", Schema: "public", Identity: "public.c_id_idx"})},
		ddl:  []string{"create table c (id int)", "create index on c (id)"},
		keys: []txn.Key{txn.TableKey("public", "c"), txn.TableKey("public", "c_id_idx")},
	}, {
		name:    "DDL in a DO block is replayed as the block, once",
		records: []capture.DDLRecord{rec("do $$ begin create table d (id int); create table e (id int); end $$", "CREATE TABLE", table("public", "d")), rec("do $$ begin create table d (id int); create table e (id int); end $$", "CREATE TABLE", table("public", "e"))},
		ddl:     []string{"do $$ begin create table d (id int); create table e (id int); end $$"},
		keys:    []txn.Key{txn.TableKey("public", "d"), txn.TableKey("public", "e")},
	}, {
		name:    "DDL in a DO block with rows in the transaction is refused",
		stmts:   []ddlStmt{stmt(ins, ins)},
		records: []capture.DDLRecord{rec("do $$ begin create table d (id int); end $$", "CREATE TABLE", table("public", "d"))},
		rows:    true,
		err:     "cannot be replicated exactly in a transaction that also writes rows",
	}, {
		name:    "a function that ran DDL twice in the transaction is refused",
		records: []capture.DDLRecord{rec("select mk()", "CREATE TABLE", table("public", "p1")), rec("select mk()", "CREATE TABLE", table("public", "p2"))},
		blocks:  map[string]blockRuns{rec("select mk()", "").QueryHash: {runs: 2}},
		err:     "sent once in the transaction",
	}, {
		name:    "a function that ran DDL through the extended protocol is refused (its parameters are not replayed)",
		records: []capture.DDLRecord{rec("select mk($1)", "CREATE TABLE", table("public", "p1"))},
		blocks:  map[string]blockRuns{rec("select mk($1)", "").QueryHash: {runs: 1, extended: true}},
		err:     "as a simple query without parameters",
	}, {
		name:    "statements no event trigger sees are replayed in their place",
		stmts:   []ddlStmt{{sql: "truncate x", sent: "truncate x"}, stmt("create table f (id int)", "create table f (id int)"), {sql: "select setval('s', 5)"}},
		records: []capture.DDLRecord{rec("create table f (id int)", "CREATE TABLE", table("public", "f"))},
		ddl:     []string{"truncate x", "create table f (id int)", "select setval('s', 5)"},
		keys:    []txn.Key{txn.TableKey("public", "f")},
	}, {
		name:    "one query string with DDL both as a statement and in a function is refused",
		stmts:   []ddlStmt{stmt("create table g (id int)", "select mk(); create table g (id int)")},
		records: []capture.DDLRecord{rec("select mk(); create table g (id int)", "CREATE TABLE", table("public", "h")), rec("select mk(); create table g (id int)", "CREATE TABLE", table("public", "g"))},
		err:     "both as statements and inside",
	}, {
		name:  "an extension's update scripts that drop operators are part of its CREATE EXTENSION",
		stmts: []ddlStmt{stmt("create extension hstore", "create extension hstore")},
		records: []capture.DDLRecord{rec("create extension hstore", "DROP OPERATOR"), rec("create extension hstore", "DROP OPERATOR"),
			rec("create extension hstore", "CREATE EXTENSION", capture.DDLObject{Type: "extension", Identity: "hstore"})},
		ddl: []string{"create extension hstore"},
	}, {
		name:  "a DROP the client sent before CREATE EXTENSION in one string is kept",
		stmts: []ddlStmt{stmt("drop table x", "drop table x; create extension cube"), stmt("create extension cube", "drop table x; create extension cube")},
		records: []capture.DDLRecord{rec("drop table x; create extension cube", "DROP TABLE"), rec("drop table x; create extension cube", "DROP OPERATOR"),
			rec("drop table x; create extension cube", "CREATE EXTENSION", capture.DDLObject{Type: "extension", Identity: "cube"})},
		ddl: []string{"drop table x", "create extension cube"},
	}, {
		name: "a statement that did nothing accounts for its record and is not replayed",
		stmts: []ddlStmt{stmt("drop type if exists r", "drop type if exists r; create type r as range (subtype = int4)"),
			stmt("create type r as range (subtype = int4)", "drop type if exists r; create type r as range (subtype = int4)")},
		records: []capture.DDLRecord{noop(rec("drop type if exists r; create type r as range (subtype = int4)", "DROP TYPE")),
			rec("drop type if exists r; create type r as range (subtype = int4)", "CREATE TYPE", capture.DDLObject{Type: "type", Schema: "public", Identity: "public.r"})},
		ddl:  []string{"create type r as range (subtype = int4)"},
		keys: []txn.Key{txn.TableKey("public", "r")},
	}, {
		name:    "a DO block whose DDL did nothing is not replayed, nor refused beside rows",
		stmts:   []ddlStmt{stmt(ins, ins)},
		records: []capture.DDLRecord{noop(rec("do $$ begin create table if not exists d (id int); end $$", "CREATE TABLE"))},
		rows:    true,
	}, {
		name:    "one query string that rolled back some of its different DDL is refused",
		stmts:   []ddlStmt{stmt("alter table a add x int", "q"), stmt("alter table a add y int", "q")},
		records: []capture.DDLRecord{rec("q", "ALTER TABLE", table("public", "a"))},
		err:     "rolled back and others not",
	}, {
		name:    "keys of quoted names, columns and constraints",
		records: []capture.DDLRecord{rec("q", "ALTER TABLE", capture.DDLObject{Type: "table column", Schema: "public", Identity: `public."My T".c`}, capture.DDLObject{Type: "table constraint", Schema: "s", Identity: "k on s.t"}, capture.DDLObject{Type: "function", Schema: "public", Identity: "public.f(integer)"}, capture.DDLObject{Type: "schema", Identity: "s"})},
		ddl:     []string{"q"},
		keys:    []txn.Key{txn.TableKey("public", "My T"), txn.TableKey("s", "t"), txn.TableKey("public", "f")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			blocks := tc.blocks
			if blocks == nil { // every unmatched record's query ran once, as a simple query
				blocks = map[string]blockRuns{}
				for _, r := range tc.records {
					blocks[r.QueryHash] = blockRuns{runs: 1}
				}
			}
			j, err := joinDDL(tc.stmts, tc.records, blocks, tc.rows)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.ddl, j.ddl)
			require.Equal(t, tc.keys, j.keys)
			require.Len(t, j.settings, len(j.ddl))
			require.Len(t, j.rowsBefore, len(j.ddl))
			if tc.at != nil {
				require.Equal(t, tc.at, j.rowsBefore)
			}
		})
	}
}
