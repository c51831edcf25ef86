package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// loState is what every node must agree on about one large object: its
// owner, privileges, comment and content (or that it does not exist).
func loState(t *testing.T, conn *pgx.Conn, oid uint32) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT coalesce((SELECT format('owner=%s acl=%s comment=%s data=%s',
		pg_get_userbyid(lomowner), lomacl, obj_description(oid, 'pg_largeobject'),
		CASE WHEN (SELECT max(pageno) FROM pg_largeobject WHERE loid = oid) < 400000 THEN md5(lo_get(oid))
		ELSE (SELECT md5(string_agg(pageno || ':' || md5(data), ',' ORDER BY pageno)) FROM pg_largeobject WHERE loid = oid) END)
		FROM pg_largeobject_metadata WHERE oid = $1), 'none')`, oid).Scan(&s)
	require.NoError(t, err)
	return s
}

// requireSameLargeObject checks every node holds oid in one state, and
// returns it.
func (c *cluster) requireSameLargeObject(t *testing.T, oid uint32) string {
	t.Helper()
	c.waitConverged()
	first := loState(t, c.direct(0), oid)
	for i := 1; i < len(c.nodes); i++ {
		require.Equal(t, first, loState(t, c.direct(i), oid), "large object %d on node %d against node 1", oid, i+1)
	}
	return first
}

// TestLargeObjectsAreReplicated: large objects live in system catalogs,
// which logical decoding does not carry; what a transaction did to them
// reaches every node all the same, however it did it: pgx's large object
// API (SQL calls with parameters), autocommit calls, an unlink of objects
// named by a column, a write rolled back to a savepoint, a truncation that
// only removes pages, privileges, a comment and an owner set in the
// transaction that created the object, an object written by a function,
// and one larger than an entry of the order.
func TestLargeObjectsAreReplicated(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "dbsm", func(n *config.Node) { n.MaxEntryBytes = 1 << 20 })
	ctx := context.Background()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, "create table docs(id int primary key, lo oid)")
	require.NoError(t, err)

	// pgx's API: lo_create, lo_open, lowrite, lo_truncate, in a transaction.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	los := tx.LargeObjects()
	oid, err := los.Create(ctx, 0)
	require.NoError(t, err)
	lo, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite|pgx.LargeObjectModeRead)
	require.NoError(t, err)
	content := bytes.Repeat([]byte("large object content "), 300) // 6,300 bytes: four pages
	_, err = lo.Write(content)
	require.NoError(t, err)
	require.NoError(t, lo.Close())
	_, err = tx.Exec(ctx, "insert into docs values (1, $1)", oid)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	state := c.requireSameLargeObject(t, oid)
	require.Contains(t, state, "owner=ordo")
	var got []byte
	require.NoError(t, c.direct(2).QueryRow(ctx, "select lo_get($1)", oid).Scan(&got))
	require.Equal(t, content, got, "node 3 has the content")

	// A change rolled back to a savepoint is not replicated; the rest is.
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "select lo_put($1, 0, 'AAAA')", oid)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "savepoint s")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "select lo_put($1, 10, 'BBBB')", oid)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "rollback to savepoint s")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	c.requireSameLargeObject(t, oid)
	require.NoError(t, c.direct(1).QueryRow(ctx, "select lo_get($1, 0, 14)", oid).Scan(&got))
	require.Equal(t, "AAAAe objec", string(got[:11]))

	// Cut at a page boundary: pages are only deleted, none rewritten.
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	los = tx.LargeObjects()
	lo, err = los.Open(ctx, oid, pgx.LargeObjectModeWrite)
	require.NoError(t, err)
	require.NoError(t, lo.Truncate(4096))
	require.NoError(t, tx.Commit(ctx))
	c.requireSameLargeObject(t, oid)
	var size int
	require.NoError(t, c.direct(2).QueryRow(ctx, "select length(lo_get($1))", oid).Scan(&size))
	require.Equal(t, 4096, size)

	// Cut inside a hole of a sparse object, at a page boundary: its page
	// is deleted, and PostgreSQL writes one where it ends.
	var sparse uint32
	require.NoError(t, conn.QueryRow(ctx, "select lo_from_bytea(0, '')").Scan(&sparse))
	_, err = conn.Exec(ctx, "select lo_put($1, 10000, 'tail')", sparse)
	require.NoError(t, err)
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	los = tx.LargeObjects()
	lo, err = los.Open(ctx, sparse, pgx.LargeObjectModeWrite)
	require.NoError(t, err)
	require.NoError(t, lo.Truncate(4096))
	require.NoError(t, tx.Commit(ctx))
	require.Contains(t, c.requireSameLargeObject(t, sparse), "data="+md5hex(strings.Repeat("\x00", 4096)))

	// pgjdbc's BlobTest.largeLargeObject: an empty object extended past
	// 2 GiB by a truncation is one stored page near its end (its content
	// travels as that page; lo_get refuses more than 1 GB). And one cut
	// where no data is stored ends with a page that holds none.
	for _, size := range []int64{1<<31 + 1024, 4096} {
		var huge uint32
		require.NoError(t, conn.QueryRow(ctx, "select lo_create(0)").Scan(&huge))
		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
		los = tx.LargeObjects()
		lo, err = los.Open(ctx, huge, pgx.LargeObjectModeWrite)
		require.NoError(t, err)
		require.NoError(t, lo.Truncate(size))
		require.NoError(t, tx.Commit(ctx))
		c.requireSameLargeObject(t, huge)
		for i := range 3 {
			tx, err := c.direct(i).Begin(ctx)
			require.NoError(t, err)
			los := tx.LargeObjects()
			lo, err := los.Open(ctx, huge, pgx.LargeObjectModeRead)
			require.NoError(t, err)
			end, err := lo.Seek(0, io.SeekEnd)
			require.NoError(t, err)
			require.Equal(t, size, end, "node %d", i+1)
			require.NoError(t, tx.Rollback(ctx))
		}
	}

	// Autocommit, simple protocol: a new object, then its privileges,
	// comment and owner in the transaction that creates another.
	_, err = conn.Exec(ctx, "create role lo_reader")
	require.NoError(t, err)
	var auto uint32
	require.NoError(t, conn.QueryRow(ctx, "select lo_from_bytea(0, 'autocommit')", pgx.QueryExecModeSimpleProtocol).Scan(&auto))
	require.Contains(t, c.requireSameLargeObject(t, auto), "data="+md5hex("autocommit"))
	_, err = conn.Exec(ctx, `begin;
		select lo_create(424242);
		grant select on large object 424242 to lo_reader;
		comment on large object 424242 is 'granted';
		alter large object 424242 owner to lo_reader;
		select lo_put(424242, 0, 'x');
		commit`)
	require.NoError(t, err)
	state = c.requireSameLargeObject(t, 424242)
	require.Contains(t, state, "owner=lo_reader acl={lo_reader=rw/lo_reader} comment=granted")

	// Unlinked through a column: which objects, only PostgreSQL knows
	// (one of them empty: it has no pages to delete).
	var empty uint32
	require.NoError(t, conn.QueryRow(ctx, "select lo_create(0)").Scan(&empty))
	require.NotEqual(t, "none", c.requireSameLargeObject(t, empty))
	_, err = conn.Exec(ctx, "insert into docs values (2, $1), (3, 424242), (4, $2)", auto, empty)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "select lo_unlink(lo) from docs where id >= 2")
	require.NoError(t, err)
	require.Equal(t, "none", c.requireSameLargeObject(t, auto))
	require.Equal(t, "none", c.requireSameLargeObject(t, 424242))
	require.Equal(t, "none", c.requireSameLargeObject(t, empty))

	// Written by a function: the statement calls no large object
	// function the session can see.
	_, err = conn.Exec(ctx, `create function put_doc(o oid, d bytea) returns void language plpgsql as $$
		begin perform lo_from_bytea(o, d); end $$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "select put_doc(515151, 'by a function')")
	require.NoError(t, err)
	require.Contains(t, c.requireSameLargeObject(t, 515151), "data="+md5hex("by a function"))

	// Larger than an entry of the order (1 MiB here): its content
	// travels in fragments.
	big := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB
	var bigOID uint32
	require.NoError(t, conn.QueryRow(ctx, "select lo_from_bytea(0, $1)", big).Scan(&bigOID))
	require.Contains(t, c.requireSameLargeObject(t, bigOID), "data="+md5hex(string(big)))

	// Every node ends with the same objects.
	for i := 1; i < 3; i++ {
		var a, b string
		q := "select coalesce(string_agg(oid::text, ',' order by oid), '') from pg_largeobject_metadata"
		require.NoError(t, c.direct(0).QueryRow(ctx, q).Scan(&a))
		require.NoError(t, c.direct(i).QueryRow(ctx, q).Scan(&b))
		require.Equal(t, a, b, "node %d", i+1)
	}
}

func md5hex(s string) string {
	return fmt.Sprintf("%x", md5.Sum([]byte(s)))
}

// TestLargeObjectConflictsAcrossNodes: two transactions that write one
// large object through two nodes conflict in certification: one commits,
// the other aborts with 40001, and every node keeps the winner's content.
func TestLargeObjectConflictsAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm-si", "dbsm"} {
		t.Run(protocol, func(t *testing.T) {
			c := startCluster(t, 3, protocol)
			ctx := context.Background()
			a, b := c.connect(0), c.connect(1)
			_, err := a.Exec(ctx, "select lo_from_bytea(700, 'start')")
			require.NoError(t, err)
			c.waitConverged()
			ta, err := a.Begin(ctx)
			require.NoError(t, err)
			tb, err := b.Begin(ctx)
			require.NoError(t, err)
			_, err = ta.Exec(ctx, "select lo_put(700, 0, 'AAAAA')")
			require.NoError(t, err)
			_, err = tb.Exec(ctx, "select lo_put(700, 0, 'BBBBB')")
			require.NoError(t, err)
			errA := ta.Commit(ctx)
			errB := tb.Commit(ctx)
			var pe *pgconn.PgError
			switch {
			case errA == nil:
				require.True(t, errors.As(errB, &pe) && pe.Code == "40001", "the second to commit aborts: %v", errB)
			case errB == nil:
				require.True(t, errors.As(errA, &pe) && pe.Code == "40001", "the second to commit aborts: %v", errA)
			default:
				t.Fatalf("both aborted: %v, %v", errA, errB)
			}
			want := "AAAAA"
			if errA != nil {
				want = "BBBBB"
			}
			require.Contains(t, c.requireSameLargeObject(t, 700), "data="+md5hex(want))
		})
	}
}

// TestLargeObjectsThroughTheFastPath: libpq's large object functions and
// pgjdbc's LargeObjectManager call lo_creat, lo_open, lowrite and
// lo_unlink with the FunctionCall message. Through a node they work, in a
// transaction block and in autocommit, and what they write is replicated:
// psql's \lo_import (libpq), and the messages pgjdbc sends.
func TestLargeObjectsThroughTheFastPath(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	setup := c.connect(0)

	// libpq: \lo_import reads a client-side file with lo_creat, lo_open,
	// lowrite and lo_close, all through the fast path.
	psql, err := exec.LookPath("psql")
	if err != nil {
		psql = filepath.Join(c.pg.BinDir, "psql")
	}
	file := filepath.Join(t.TempDir(), "doc.bin")
	content := bytes.Repeat([]byte{0, 1, 2, 250, 'x'}, 3000)
	require.NoError(t, os.WriteFile(file, content, 0o600))
	out, err := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", c.dsn(0), "-c", `\lo_import `+file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var oid uint32
	_, err = fmt.Sscanf(strings.TrimSpace(string(out)), "lo_import %d", &oid)
	require.NoError(t, err, "psql said %q", out)
	c.requireSameLargeObject(t, oid)
	var got []byte
	require.NoError(t, c.direct(2).QueryRow(ctx, "select lo_get($1)", oid).Scan(&got))
	require.Equal(t, content, got)

	// pgjdbc's sequence: BEGIN, lo_creat, lo_open, lowrite, lo_close,
	// COMMIT, then lo_unlink in autocommit; binary arguments.
	pc, err := pgconn.Connect(ctx, c.dsn(1))
	require.NoError(t, err)
	h, err := pc.Hijack()
	require.NoError(t, err)
	defer h.Conn.Close()
	node2 := c.connect(1) // OIDs of functions are the node's own
	fnOID := func(name string) uint32 {
		var o uint32
		require.NoError(t, node2.QueryRow(ctx, "select $1::regproc::oid", name).Scan(&o))
		return o
	}
	int4 := func(v int32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	call := func(fn string, args ...[]byte) []byte {
		h.Frontend.Send(&pgproto3.FunctionCall{Function: fnOID(fn), ArgFormatCodes: []uint16{1}, Arguments: args, ResultFormatCode: 1})
		require.NoError(t, h.Frontend.Flush())
		var res []byte
		for {
			msg, err := h.Frontend.Receive()
			require.NoError(t, err)
			switch m := msg.(type) {
			case *pgproto3.FunctionCallResponse:
				res = append([]byte(nil), m.Result...)
			case *pgproto3.ErrorResponse:
				t.Fatalf("%s: %s %s", fn, m.Code, m.Message)
			case *pgproto3.ReadyForQuery:
				return res
			}
		}
	}
	require.NotContains(t, exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "begin"}}), "Error")
	created := call("lo_creat", int4(0x60000))
	require.Len(t, created, 4)
	jdbcOID := uint32(created[0])<<24 | uint32(created[1])<<16 | uint32(created[2])<<8 | uint32(created[3])
	fd := call("lo_open", created, int4(0x60000))
	call("lowrite", fd, []byte("written through the fast path"))
	call("lo_close", fd)
	require.NotContains(t, exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "commit"}}), "Error")
	require.Contains(t, c.requireSameLargeObject(t, jdbcOID), "data="+md5hex("written through the fast path"))
	call("lo_unlink", created) // autocommit
	require.Equal(t, "none", c.requireSameLargeObject(t, jdbcOID))

	// A function that writes rows, called through the fast path in
	// autocommit: replicated like a statement.
	_, err = setup.Exec(ctx, `create table fp(x int primary key);
		create function fp_add(v int) returns int language sql as 'insert into fp values (v) returning v'`)
	require.NoError(t, err)
	c.waitConverged()
	require.Equal(t, int4(7), call("fp_add", int4(7)))
	c.waitConverged()
	for i := range 3 {
		var n int
		require.NoError(t, c.direct(i).QueryRow(ctx, "select count(*) from fp where x = 7").Scan(&n))
		require.Equal(t, 1, n, "node %d", i+1)
	}
}
