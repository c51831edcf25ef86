package capture

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/txn"
)

var server *pglocal.Server

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{N: 1})
		if err != nil {
			fmt.Fprintln(os.Stderr, "capture tests need PostgreSQL:", err)
			return 1
		}
		defer c.Stop()
		fmt.Fprintf(os.Stderr, "capture tests on %s (%s)\n", c.Version, c.BinDir)
		server = c.Servers[0]
		return m.Run()
	}())
}

func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), server.DSN("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	// The superuser is named ordo: keep "$user" from putting test tables
	// into the ordo schema once it exists.
	exec(t, conn, "SET search_path = public")
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	_, err := conn.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// startCapture starts a capture on its own slot with a fresh registry.
func startCapture(t *testing.T, slot string, cfg Config) (*Capture, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.DSN, cfg.Slot, cfg.Registerer = server.DSN("postgres"), slot, reg
	c, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Stop()
		conn, err := pgx.Connect(context.Background(), server.DSN("postgres"))
		if err == nil {
			_, _ = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
			conn.Close(context.Background())
		}
	})
	return c, reg
}

// prepared runs sql in a transaction, PREPAREs it as gid and returns the
// connection (the caller decides the outcome).
func prepared(t *testing.T, conn *pgx.Conn, gid txn.GID, sql ...string) {
	t.Helper()
	exec(t, conn, "BEGIN")
	for _, s := range sql {
		exec(t, conn, s)
	}
	exec(t, conn, "PREPARE TRANSACTION '"+string(gid)+"'")
	t.Cleanup(func() { // a failed test must not leave it blocking slot creation
		c, err := pgx.Connect(context.Background(), server.DSN("postgres"))
		if err == nil {
			_, _ = c.Exec(context.Background(), "ROLLBACK PREPARED '"+string(gid)+"'")
			c.Close(context.Background())
		}
	})
}

func TestAwaitPreparedWriteSet(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE TABLE aw (id int PRIMARY KEY, v text, n numeric)")
	exec(t, conn, "INSERT INTO aw VALUES (1, 'one', 1.5), (2, 'two', NULL)") // before the slot: not seen
	c, reg := startCapture(t, "aw_slot", Config{})

	gid := txn.NewGID(1, 1)
	began := time.Now()
	prepared(t, conn, gid,
		"INSERT INTO aw VALUES (3, 'three', 3.14159265358979323846)",
		"UPDATE aw SET v = 'uno' WHERE id = 1",
		"UPDATE aw SET id = 20 WHERE id = 2",
		"DELETE FROM aw WHERE id = 3")
	ws, err := c.Await(ctx, gid)
	require.NoError(t, err)
	t.Logf("write set in hand %s after PREPARE", time.Since(began))
	exec(t, conn, "COMMIT PREPARED '"+string(gid)+"'")

	require.Equal(t, gid, ws.GID)
	require.Len(t, ws.Rows, 4)
	require.Equal(t, OpInsert, ws.Rows[0].Op)
	require.Equal(t, "public", ws.Rows[0].Table.Schema)
	require.Equal(t, []Value{{Text, "3"}, {Text, "three"}, {Text, "3.14159265358979323846"}}, ws.Rows[0].Values)
	require.Equal(t, txn.RowKey("public", "aw", "1"), ws.Rows[1].Key)
	require.Equal(t, txn.RowKey("public", "aw", "20"), ws.Rows[2].Key)
	require.Equal(t, txn.RowKey("public", "aw", "2"), ws.Rows[2].OldKey)
	require.Equal(t, OpDelete, ws.Rows[3].Op)
	require.Equal(t, []string{"3"}, ws.Rows[3].OldValues)

	// A rolled back prepared transaction is handed out too; nothing leaks.
	gid2 := txn.NewGID(1, 2)
	prepared(t, conn, gid2, "INSERT INTO aw VALUES (4, 'four', 4)")
	ws, err = c.Await(ctx, gid2)
	require.NoError(t, err)
	require.Len(t, ws.Rows, 1)
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid2)+"'")
	require.Equal(t, 0.0, counter(t, reg, "ordo_capture_unreplicated_commits_total"))
	require.Equal(t, 2.0, counter(t, reg, "ordo_capture_prepared_total"))

	// The slot is confirmed: it does not retain WAL of decoded transactions.
	require.Eventually(t, func() bool {
		var behind bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = 'aw_slot'`,
			lsnText(ws.EndLSN)).Scan(&behind))
		return behind
	}, 10*time.Second, 100*time.Millisecond)
}

func lsnText(l uint64) string { return fmt.Sprintf("%X/%X", l>>32, uint32(l)) }

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestAwaitTimeoutAndStop(t *testing.T) {
	c, _ := startCapture(t, "timeout_slot", Config{AwaitTimeout: 300 * time.Millisecond})
	began := time.Now()
	_, err := c.Await(context.Background(), txn.NewGID(9, 9))
	require.ErrorIs(t, err, ErrAwaitTimeout)
	require.Contains(t, err.Error(), "ordo_9_9")
	require.Less(t, time.Since(began), 3*time.Second)
}

func TestLeakDetector(t *testing.T) {
	conn := connect(t)
	exec(t, conn, "CREATE TABLE leak (id int PRIMARY KEY)")
	exec(t, conn, "CREATE SCHEMA IF NOT EXISTS _ordo")
	exec(t, conn, "CREATE TABLE IF NOT EXISTS _ordo.applied (seqno bigint PRIMARY KEY, gid text NOT NULL UNIQUE, applied_at timestamptz NOT NULL DEFAULT now())")
	c, reg := startCapture(t, "leak_slot", Config{})

	// An apply (writes _ordo.applied in the same transaction) is not a leak.
	exec(t, conn, "BEGIN")
	exec(t, conn, "INSERT INTO leak VALUES (1)")
	exec(t, conn, "INSERT INTO _ordo.applied (seqno, gid) VALUES (1, 'ordo_2_1')")
	exec(t, conn, "COMMIT")
	// A decided prepared transaction is not a leak.
	gid := txn.NewGID(1, 7)
	prepared(t, conn, gid, "INSERT INTO leak VALUES (2)")
	_, err := c.Await(context.Background(), gid)
	require.NoError(t, err)
	exec(t, conn, "COMMIT PREPARED '"+string(gid)+"'")
	require.Eventually(t, func() bool { return counter(t, reg, "ordo_capture_applies_total") == 1 }, 10*time.Second, 20*time.Millisecond)

	// Nor is Ordo's own bookkeeping (an early rollback's record).
	exec(t, conn, "CREATE TABLE IF NOT EXISTS _ordo.rolled_back (gid text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())")
	exec(t, conn, "INSERT INTO _ordo.rolled_back (gid) VALUES ('ordo_1_9')")
	exec(t, conn, "DELETE FROM _ordo.rolled_back")

	// A write sneaked directly into PostgreSQL is.
	exec(t, conn, "INSERT INTO leak VALUES (3)")
	require.Eventually(t, func() bool { return counter(t, reg, "ordo_capture_unreplicated_commits_total") == 1 }, 10*time.Second, 20*time.Millisecond)
	// So is a prepared transaction committed under a name Ordo did not make.
	exec(t, conn, "BEGIN; INSERT INTO leak VALUES (4); PREPARE TRANSACTION 'sneaky'")
	exec(t, conn, "COMMIT PREPARED 'sneaky'")
	require.Eventually(t, func() bool { return counter(t, reg, "ordo_capture_unreplicated_commits_total") == 2 }, 10*time.Second, 20*time.Millisecond)
}

// On PostgreSQL 16 and later the stream asks for changes without a
// replication origin only: an apply, which runs under one, never reaches
// the stream. On 15 it is decoded and recognised by its proof row.
func TestAppliesUnderAnOriginAreNotDecoded(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE TABLE origin_t (id int PRIMARY KEY)")
	exec(t, conn, "CREATE SCHEMA IF NOT EXISTS _ordo")
	exec(t, conn, "CREATE TABLE IF NOT EXISTS _ordo.applied (seqno bigint PRIMARY KEY, gid text NOT NULL UNIQUE, applied_at timestamptz NOT NULL DEFAULT now())")
	c, reg := startCapture(t, "origin_slot", Config{})
	var version int
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version))

	applier := connect(t)
	exec(t, applier, "SELECT pg_replication_origin_create('ordo_apply_test') WHERE pg_replication_origin_oid('ordo_apply_test') IS NULL")
	exec(t, applier, "SELECT pg_replication_origin_session_setup('ordo_apply_test')")
	for i := 1; i <= 3; i++ {
		exec(t, applier, "BEGIN")
		exec(t, applier, "INSERT INTO origin_t VALUES ($1)", i)
		exec(t, applier, "INSERT INTO _ordo.applied (seqno, gid) VALUES ($1, $2)", 1000+i, string(txn.NewGID(2, uint64(1000+i))))
		exec(t, applier, "COMMIT")
	}
	// Everything before this prepared transaction has been streamed once
	// its write set arrives.
	gid := txn.NewGID(1, 77)
	prepared(t, conn, gid, "INSERT INTO origin_t VALUES (100)")
	ws, err := c.Await(ctx, gid)
	require.NoError(t, err)
	require.Len(t, ws.Rows, 1, "a local transaction is decoded whatever the applies around it")
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid)+"'")

	if version >= OriginFilterVersion {
		require.Zero(t, counter(t, reg, "ordo_capture_applies_total"), "PostgreSQL %d: applies under an origin are left out by the walsender", version)
	} else {
		require.Equal(t, 3.0, counter(t, reg, "ordo_capture_applies_total"), "PostgreSQL %d: applies are decoded and recognised", version)
	}
	require.Zero(t, counter(t, reg, "ordo_capture_unreplicated_commits_total"))
}

func TestLimitsOnRealTransactions(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE TABLE lim (id int PRIMARY KEY, v text)")
	exec(t, conn, "CREATE TABLE nokey (v text)")
	c, _ := startCapture(t, "lim_slot", Config{Limits: Limits{MaxRows: 100}})

	gid := txn.NewGID(1, 1)
	prepared(t, conn, gid, "INSERT INTO lim SELECT g, 'x' FROM generate_series(1, 101) g")
	_, err := c.Await(ctx, gid)
	require.ErrorIs(t, err, ErrTooLarge)
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid)+"'")

	// Inserts into a table without a primary key are replicated: they need
	// no key and conflict with nothing but their table's X.
	gid = txn.NewGID(1, 2)
	prepared(t, conn, gid, "INSERT INTO nokey VALUES ('a')")
	ws, err := c.Await(ctx, gid)
	require.NoError(t, err)
	require.Len(t, ws.Rows, 1)
	require.Zero(t, ws.Rows[0].Key.Level)
	require.Equal(t, []txn.KeyMode{{Key: txn.TableKey("public", "nokey"), Mode: txn.IX}}, ws.Keys().Sorted())
	exec(t, conn, "COMMIT PREPARED '"+string(gid)+"'")

	// ReplicaIdentitySQL makes it REPLICA IDENTITY FULL (it leaves
	// tables with a primary key alone); a delete then carries the whole
	// old row, which keys it.
	exec(t, conn, ReplicaIdentitySQL)
	var ident string
	require.NoError(t, conn.QueryRow(ctx, "SELECT string_agg(relname || '=' || relreplident::text, ',' ORDER BY relname) FROM pg_class WHERE relname IN ('nokey', 'lim')").Scan(&ident))
	require.Equal(t, "lim=d,nokey=f", ident)
	gid = txn.NewGID(1, 3)
	prepared(t, conn, gid, "DELETE FROM nokey")
	ws, err = c.Await(ctx, gid)
	require.NoError(t, err)
	require.Len(t, ws.Rows, 1)
	require.Equal(t, []Value{{Kind: Text, Text: "a"}}, ws.Rows[0].OldRow)
	require.Equal(t, FullRowKey(ws.Rows[0].Table, ws.Rows[0].OldRow), ws.Rows[0].Key)
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid)+"'")
}

func TestLargeTransaction(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE TABLE large (id int PRIMARY KEY, v text)")
	c, _ := startCapture(t, "large_slot", Config{AwaitTimeout: time.Minute})
	gid := txn.NewGID(1, 100000)
	began := time.Now()
	prepared(t, conn, gid, "INSERT INTO large SELECT g, md5(g::text) FROM generate_series(1, 100000) g")
	ws, err := c.Await(ctx, gid)
	require.NoError(t, err)
	t.Logf("100,000-row write set (%d bytes counted) in %s", ws.Bytes, time.Since(began))
	exec(t, conn, "COMMIT PREPARED '"+string(gid)+"'")
	require.Len(t, ws.Rows, 100000)
	require.Equal(t, txn.RowKey("public", "large", "100000"), ws.Rows[99999].Key)
	require.Less(t, ws.Bytes, int64(DefaultMaxBytes))
}

// TestRealServerBytes decodes the bytes PostgreSQL itself produces for
// two-phase transactions (through the SQL interface of a second slot),
// message by message.
func TestRealServerBytes(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	require.NoError(t, Setup(ctx, Config{DSN: server.DSN("postgres"), Slot: "setup_slot"}))
	require.NoError(t, Setup(ctx, Config{DSN: server.DSN("postgres"), Slot: "setup_slot"}), "Setup is idempotent")
	exec(t, conn, "SELECT pg_drop_replication_slot('setup_slot')")
	exec(t, conn, "CREATE TABLE rb (k1 int, k2 text, v jsonb, PRIMARY KEY (k2, k1))")
	exec(t, conn, "SELECT pg_create_logical_replication_slot('bytes_slot', 'pgoutput', false, true)")
	defer exec(t, conn, "SELECT pg_drop_replication_slot('bytes_slot')")

	prepared(t, conn, "ordo_1_2", `INSERT INTO rb VALUES (2, 'c', NULL)`)
	exec(t, conn, "ROLLBACK PREPARED 'ordo_1_2'")
	prepared(t, conn, "ordo_1_1", `INSERT INTO rb VALUES (1, 'a b', '{"x": [1, 2]}')`, "TRUNCATE rb")
	exec(t, conn, "COMMIT PREPARED 'ordo_1_1'")

	rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_get_binary_changes('bytes_slot', NULL, NULL,
		'proto_version', '3', 'two_phase', 'on', 'publication_names', 'ordo')`)
	require.NoError(t, err)
	msgs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	cat := connect(t)
	d := NewDecoder(Limits{}, func(rel *RelationMsg) ([]string, error) { return primaryKey(ctx, cat, rel.RelID) })
	var evs []Event
	var types []byte
	for _, b := range msgs {
		types = append(types, b[0])
		m, err := Decode(b)
		require.NoError(t, err, "%q", b)
		ev, err := d.Handle(m)
		require.NoError(t, err)
		if ev != nil {
			evs = append(evs, ev)
		}
	}
	// The SQL interface decodes lazily, after ROLLBACK PREPARED: PostgreSQL
	// then knows the transaction aborted and sends no changes for it.
	require.Equal(t, "bPrbRIRTPK", string(types))
	require.Len(t, evs, 4)
	require.Equal(t, "ordo_1_2", string(evs[0].(Prepared).WriteSet.GID))
	require.Empty(t, evs[0].(Prepared).WriteSet.Rows)
	require.Equal(t, "ordo_1_2", evs[1].(RollbackPrepared).GID)
	ws := evs[2].(Prepared).WriteSet
	require.Equal(t, txn.GID("ordo_1_1"), ws.GID)
	require.Equal(t, txn.RowKey("public", "rb", "a b", "1"), ws.Rows[0].Key, "key in primary key order (k2, k1)")
	require.Equal(t, Value{Text, `{"x": [1, 2]}`}, ws.Rows[0].Values[2])
	require.Equal(t, OpTruncate, ws.Rows[1].Op)
	require.Equal(t, "ordo_1_1", evs[3].(CommitPrepared).GID)
}

// TestAwaitAfterTheTransactionEnded: a prepared transaction rolled back
// before its session claims its write set (the node rolls back prepared
// transactions that block an apply) makes Await fail at once. Await used to
// wait for a PREPARE decoded long before: until the stream had been silent
// for AwaitTimeout, or up to AwaitLimit (10 minutes) under traffic (found by
// the safety suite's postmaster-kill nemesis: a COMMIT waited 20-30 s).
func TestAwaitAfterTheTransactionEnded(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	exec(t, conn, "CREATE TABLE ended (id int PRIMARY KEY)")
	c, _ := startCapture(t, "ended_slot", Config{AwaitTimeout: 5 * time.Second})
	gid, later := txn.NewGID(1, 1), txn.NewGID(1, 2)
	prepared(t, conn, gid, "INSERT INTO ended VALUES (1)")
	exec(t, conn, "ROLLBACK PREPARED '"+string(gid)+"'")
	// Once a later PREPARE is decoded, so is the ROLLBACK PREPARED.
	prepared(t, conn, later, "INSERT INTO ended VALUES (2)")
	_, err := c.Await(ctx, later)
	require.NoError(t, err)
	exec(t, conn, "ROLLBACK PREPARED '"+string(later)+"'")

	began := time.Now()
	_, err = c.Await(ctx, gid)
	require.ErrorIs(t, err, ErrEnded)
	require.Contains(t, err.Error(), "rolled back")
	require.Less(t, time.Since(began), time.Second, "Await waited for a PREPARE decoded before it")
}

// TestStartWaitsForTheSlotToBeLetGo: a slot another connection still has
// active (the walsender of a stream that just ended lets it go when its
// process exits, a moment later) delays Start instead of failing it (a
// node started right after its slot was created, or after its previous
// run, failed with 55006 "replication slot … is active for PID …"). A
// slot that stays taken still fails Start, once the wait is over.
func TestStartWaitsForTheSlotToBeLetGo(t *testing.T) {
	ctx := context.Background()
	cfg := Config{DSN: server.DSN("postgres"), Slot: "busy_slot", Publication: DefaultPublication}
	require.NoError(t, Setup(ctx, cfg))
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, server.DSN("postgres"))
		if err == nil {
			_, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot('busy_slot')")
			conn.Close(ctx)
		}
	})
	hold := func() *pgconn.PgConn {
		rc, err := replicationConn(ctx, cfg.DSN)
		require.NoError(t, err)
		require.NoError(t, pglogrepl.StartReplication(ctx, rc, cfg.Slot, 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '3'", "two_phase 'on'", "publication_names '" + cfg.Publication + "'"}}))
		return rc
	}

	holder := hold()
	old := slotBusyWait
	slotBusyWait = 300 * time.Millisecond
	began := time.Now()
	_, err := startCaptureErr(cfg)
	slotBusyWait = old
	require.Error(t, err, "the slot never became free")
	require.True(t, slotInUse(err), "%v", err)
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)

	go func() {
		time.Sleep(500 * time.Millisecond)
		holder.Close(ctx)
	}()
	c, err := startCaptureErr(cfg)
	require.NoError(t, err, "the slot was let go half a second later")
	c.Stop()
}

// startCaptureErr is Start with a fresh registry, returning its error.
func startCaptureErr(cfg Config) (*Capture, error) {
	cfg.Registerer = prometheus.NewRegistry()
	return Start(context.Background(), cfg)
}
