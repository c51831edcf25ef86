package join

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/ownconn"
	"github.com/ordo-db/ordo/internal/totalorder"
)

// Config configures Run.
type Config struct {
	// NodeID is the joining node's id, PeerAddr its peer_listen address
	// (what the others reach it at).
	NodeID   uint32
	PeerAddr string
	// Postgres is the joining node's own database (a superuser's
	// connection string), DataDir its data directory.
	Postgres string
	DataDir  string
	// Donor is the admin API of the member to copy from.
	Donor *admin.Client
	// DonorPostgres, if set, is how to connect to the donor's database;
	// otherwise the address the donor reports, with Postgres' password.
	DonorPostgres string
	// BinDir holds pg_dump, pg_dumpall and pg_restore ("": from PATH).
	BinDir string
	// Window is the certification window: the log of a new node starts
	// this many entries before the copy (Result.LogPoint).
	Window uint64
	// Rejoin: the node is a member already (down for long, voted out,
	// or its data differs) and its database is replaced by the donor's
	// copy whatever it holds; the node keeps its id and Raft state.
	Rejoin bool
	// Progress receives one line per step and per copied table (nil:
	// none).
	Progress   io.Writer
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Result is what a join copied.
type Result struct {
	// Already: the database was copied by an earlier run; nothing was done.
	Already bool
	// Seqno is the applied prefix of the copy; Donor the member it came
	// from; Members the group as the donor knew it (with peer addresses).
	Seqno   uint64
	Donor   uint32
	Members []admin.MemberRow
	// LogPoint is where the node's log starts (nil: at the beginning):
	// Window entries before Seqno (totalorder.Config.Seed).
	LogPoint *totalorder.LogPoint
	Tables   int
	Rows     int64
	Bytes    int64
	Took     time.Duration
}

// ErrNotEmpty is returned by Run when the local database holds objects
// that are neither Ordo's copy nor an unfinished one: a join never
// overwrites a database it did not create.
var ErrNotEmpty = errors.New("join: the local database is not empty")

// inProgressFile, in the data directory, says the local database is this
// package's unfinished copy (Run may recreate it).
const inProgressFile = "join-in-progress"

// Unfinished reports whether the data directory says its database holds
// an unfinished copy (a join or rejoin was interrupted): such a node must
// not start until the copy is done again.
func Unfinished(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, inProgressFile))
	return err == nil
}

type joiner struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	began time.Time
	res   Result
}

// Run copies the donor's database into the local one (see the package
// documentation). Run again after any failure: it starts over.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	j := &joiner{cfg: cfg, log: cfg.Logger, m: newMetrics(cfg.Registerer), began: time.Now()}
	res, err := j.run(ctx)
	res.Took = time.Since(j.began)
	return res, err
}

func (j *joiner) progress(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	j.log.Info("join: " + msg)
	if j.cfg.Progress != nil {
		fmt.Fprintf(j.cfg.Progress, "join [%6.1fs] %s\n", time.Since(j.began).Seconds(), msg)
	}
}

func (j *joiner) run(ctx context.Context) (Result, error) {
	j.m.enter("check")
	seqno, state, err := j.localState(ctx)
	if err != nil {
		return j.res, err
	}
	flag := filepath.Join(j.cfg.DataDir, inProgressFile)
	_, ferr := os.Stat(flag)
	unfinished := ferr == nil
	switch {
	case j.cfg.Rejoin:
		if err := j.checkMember(ctx); err != nil {
			return j.res, err
		}
		// Whatever the database holds is replaced: it is what this
		// member had (or an unfinished copy), and the donor's copy at S
		// is what the cluster has.
		state = stateUsed
	case state == stateJoined:
		j.m.enter("done")
		j.res.Already, j.res.Seqno = true, seqno
		j.progress("already joined at seqno %d: nothing to copy", seqno)
		return j.res, nil
	case state == stateUsed && !unfinished:
		return j.res, fmt.Errorf("%w: it holds tables or schemas Ordo did not copy; a node joins with an empty database (create a new one, or drop what it holds)", ErrNotEmpty)
	}
	if err := os.MkdirAll(j.cfg.DataDir, 0o700); err != nil {
		return j.res, fmt.Errorf("join: %w", err)
	}
	if err := os.WriteFile(flag, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return j.res, fmt.Errorf("join: %w", err)
	}
	if state == stateUsed {
		if j.cfg.Rejoin {
			j.progress("rejoin: discarding the local database (its prepared transactions, capture slot and data) and recreating it empty")
		} else {
			j.progress("the local database holds an unfinished copy: recreating it empty")
		}
		if err := j.recreate(ctx); err != nil {
			return j.res, err
		}
	}

	if !j.cfg.Rejoin {
		j.m.enter("member")
		ms, err := j.cfg.Donor.AddMember(ctx, uint64(j.cfg.NodeID), j.cfg.PeerAddr)
		if err != nil {
			return j.res, fmt.Errorf("join: add node %d as a learner: %w", j.cfg.NodeID, err)
		}
		j.progress("node %d is a learner of the cluster (%d members)", j.cfg.NodeID, len(ms.Members))
	}

	j.m.enter("snapshot")
	lease, err := j.cfg.Donor.StartTransfer(ctx, j.cfg.Window)
	if err != nil {
		return j.res, fmt.Errorf("join: ask %s for a snapshot: %w", j.cfg.Donor.Endpoint(), err)
	}
	defer lease.Close()
	j.res.Seqno, j.res.Donor, j.res.Members, j.res.LogPoint = lease.Seqno, lease.Donor, lease.Members, lease.LogPoint
	j.m.seqno.Set(float64(lease.Seqno))
	j.progress("node %d exported snapshot %s at seqno %d", lease.Donor, lease.Snapshot, lease.Seqno)
	donorDSN, err := j.donorDSN(lease.Postgres)
	if err != nil {
		return j.res, err
	}
	if err := j.copy(ctx, donorDSN, lease.Snapshot); err != nil {
		return j.res, fmt.Errorf("join: copy from node %d: %w", lease.Donor, err)
	}
	if err := os.Remove(flag); err != nil {
		return j.res, fmt.Errorf("join: %w", err)
	}
	j.m.enter("done")
	j.progress("done: seqno %d, %d tables, %d rows, %s in %s", j.res.Seqno, j.res.Tables, j.res.Rows, size(j.res.Bytes), time.Since(j.began).Round(time.Millisecond))
	return j.res, nil
}

type localState int

const (
	stateEmpty localState = iota
	stateJoined
	stateUsed
)

// localState says whether the local database is empty, joined (and at
// which seqno), or holds something else.
func (j *joiner) localState(ctx context.Context) (uint64, localState, error) {
	conn, err := pgx.Connect(ctx, j.cfg.Postgres)
	if err != nil {
		return 0, 0, fmt.Errorf("join: connect to the local PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var joined bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('_ordo.joined') IS NOT NULL").Scan(&joined); err != nil {
		return 0, 0, fmt.Errorf("join: %w", err)
	}
	if joined {
		var s int64
		err := conn.QueryRow(ctx, "SELECT seqno FROM _ordo.joined ORDER BY at DESC LIMIT 1").Scan(&s)
		if err == nil {
			return uint64(s), stateJoined, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, fmt.Errorf("join: %w", err)
		}
	}
	var objects int
	if err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_namespace WHERE nspname <> 'public' AND nspname <> 'information_schema' AND nspname NOT LIKE 'pg\_%')
		+ (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public')
		+ (SELECT count(*) FROM pg_event_trigger)`).Scan(&objects); err != nil {
		return 0, 0, fmt.Errorf("join: %w", err)
	}
	if objects > 0 {
		return 0, stateUsed, nil
	}
	return 0, stateEmpty, nil
}

// checkMember makes sure a rejoin is one: the donor is another node, and
// it counts this node among the members (a removed node never comes back
// under its id; a new one joins without --rejoin).
func (j *joiner) checkMember(ctx context.Context) error {
	j.m.enter("member")
	ms, err := j.cfg.Donor.Members(ctx)
	if err != nil {
		return fmt.Errorf("join: ask %s for the members: %w", j.cfg.Donor.Endpoint(), err)
	}
	if ms.NodeID == j.cfg.NodeID {
		return fmt.Errorf("join: --from names this node (%d) itself: copy from another member", j.cfg.NodeID)
	}
	for _, m := range ms.Members {
		if m.ID == uint64(j.cfg.NodeID) {
			j.progress("node %d is a %s of the cluster (%d members): rejoining under its own id", j.cfg.NodeID, m.Role, len(ms.Members))
			return nil
		}
	}
	return fmt.Errorf("join: node %d is not a member of the cluster node %d knows (removed, or never added): "+
		"a node rejoins under its own id only while it is a member; join it under a new id without --rejoin (docs/membership.md)", j.cfg.NodeID, ms.NodeID)
}

// recreate drops the local database and creates it again, empty. Its
// prepared transactions are rolled back first (a database they are in
// cannot be dropped) and its replication slots dropped.
func (j *joiner) recreate(ctx context.Context) error {
	pc, err := pgx.ParseConfig(j.cfg.Postgres)
	if err != nil {
		return fmt.Errorf("join: postgres: %w", err)
	}
	if err := rollbackPrepared(ctx, pc); err != nil {
		return err
	}
	db := pc.Database
	pc.Database = "template1"
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("join: connect to template1 to recreate %q: %w", db, err)
	}
	defer conn.Close(context.Background())
	ident := pgx.Identifier{db}.Sanitize()
	for _, q := range []string{
		"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = " + quoteLiteral(db),
		"DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)",
		"CREATE DATABASE " + ident + " TEMPLATE template0",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("join: recreate database %q: %w", db, err)
		}
	}
	return nil
}

// rollbackPrepared rolls back the prepared transactions of the database
// pc names (ROLLBACK PREPARED runs only in a transaction's own database).
func rollbackPrepared(ctx context.Context, pc *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, pc)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3D000" {
		return nil // no such database: nothing prepared in it
	}
	if err != nil {
		return fmt.Errorf("join: connect to %q to roll back its prepared transactions: %w", pc.Database, err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	for _, gid := range gids {
		if _, err := conn.Exec(ctx, "ROLLBACK PREPARED "+quoteLiteral(gid)); err != nil {
			return fmt.Errorf("join: roll back prepared transaction %s: %w", gid, err)
		}
	}
	return nil
}

// donorDSN is how to connect to the donor's database.
//
// The joiner's connections to it run without the donor's session
// timeouts (ownconn): a statement_timeout of the donor's database would
// cancel the copy of a large table.
func (j *joiner) donorDSN(a admin.PostgresAddr) (string, error) {
	if j.cfg.DonorPostgres != "" {
		return ownconn.DSN(j.cfg.DonorPostgres, 0)
	}
	own, err := pgconn.ParseConfig(j.cfg.Postgres)
	if err != nil {
		return "", fmt.Errorf("join: postgres: %w", err)
	}
	kv := []string{"host=" + quoteKV(a.Host), "port=" + strconv.Itoa(int(a.Port)), "dbname=" + quoteKV(a.Database), "user=" + quoteKV(a.User)}
	if own.Password != "" {
		kv = append(kv, "password="+quoteKV(own.Password))
	}
	if own.TLSConfig == nil {
		kv = append(kv, "sslmode=disable")
	} else {
		kv = append(kv, "sslmode=prefer")
	}
	return ownconn.DSN(strings.Join(kv, " "), 0)
}

// copy copies roles, schema, rows and sequences from the donor's snapshot.
func (j *joiner) copy(ctx context.Context, donorDSN, snapshot string) error {
	dir, err := os.MkdirTemp(j.cfg.DataDir, "join-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	j.m.enter("roles")
	roles, err := j.tool(ctx, nil, "pg_dumpall", "--roles-only", "--dbname="+donorDSN)
	if err != nil {
		return err
	}
	n, err := j.restoreRoles(ctx, roles)
	if err != nil {
		return err
	}
	j.progress("roles: %d statements", n)
	settings, err := j.copyDatabaseSettings(ctx, donorDSN)
	if err != nil {
		return err
	}
	j.progress("database settings: %d (ALTER DATABASE … SET, ALTER ROLE … IN DATABASE … SET)", settings)

	j.m.enter("schema")
	dump := filepath.Join(dir, "schema.dump")
	if _, err := j.tool(ctx, nil, "pg_dump", "--schema-only", "--format=custom", "--no-publications", "--no-subscriptions",
		"--snapshot="+snapshot, "--file="+dump, "--dbname="+donorDSN); err != nil {
		return err
	}
	replicaRole := []string{"PGOPTIONS=-c session_replication_role=replica"}
	if _, err := j.tool(ctx, replicaRole, "pg_restore", "--section=pre-data", "--exit-on-error", "--dbname="+j.cfg.Postgres, dump); err != nil {
		return err
	}
	j.progress("schema: tables, types, functions and sequences created")

	j.m.enter("data")
	if err := j.copyRows(ctx, donorDSN, snapshot); err != nil {
		return err
	}

	j.m.enter("indexes")
	if _, err := j.tool(ctx, replicaRole, "pg_restore", "--section=post-data", "--exit-on-error", "--dbname="+j.cfg.Postgres, dump); err != nil {
		return err
	}
	j.progress("indexes, constraints and triggers created")

	local, err := j.localReplica(ctx)
	if err != nil {
		return err
	}
	defer local.Close(context.Background())
	_, err = local.Exec(ctx, `CREATE TABLE IF NOT EXISTS _ordo.joined (
			seqno bigint NOT NULL, donor integer NOT NULL, at timestamptz NOT NULL DEFAULT now());
		TRUNCATE _ordo.rolled_back;
		INSERT INTO _ordo.joined (seqno, donor) VALUES (`+strconv.FormatUint(j.res.Seqno, 10)+`, `+strconv.FormatUint(uint64(j.res.Donor), 10)+`)`)
	if err != nil {
		return fmt.Errorf("record the join: %w", err)
	}
	return nil
}

// localReplica connects to the local database with
// session_replication_role = replica: no trigger fires.
func (j *joiner) localReplica(ctx context.Context) (*pgx.Conn, error) {
	pc, err := pgx.ParseConfig(j.cfg.Postgres)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pc.RuntimeParams["session_replication_role"] = "replica"
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to the local PostgreSQL: %w", err)
	}
	return conn, nil
}

// table is one table to copy.
type table struct{ schema, name string }

func (t table) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// copyRows streams every replicated table's rows, then sets the sequences.
func (j *joiner) copyRows(ctx context.Context, donorDSN, snapshot string) error {
	donor, err := pgx.Connect(ctx, donorDSN)
	if err != nil {
		return fmt.Errorf("connect to the donor's PostgreSQL: %w", err)
	}
	defer donor.Close(context.Background())
	// Each table is read in a transaction of its own that imports the
	// snapshot, so the copy holds a lock on one donor table at a time (a
	// DDL apply on the donor waits for that table's copy only).
	begin := func() error {
		if _, err := donor.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
			return err
		}
		if _, err := donor.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
			return fmt.Errorf("import the donor's snapshot: %w", err)
		}
		return nil
	}
	if err := begin(); err != nil {
		return err
	}
	rows, err := donor.Query(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence = 'p'
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
		  AND (n.nspname, c.relname) NOT IN (('_ordo', 'rolled_back'), ('_ordo', 'joined'))
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("list the donor's tables: %w", err)
	}
	var tables []table
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.schema, &t.name); err != nil {
			return err
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list the donor's tables: %w", err)
	}
	j.m.tables.Set(float64(len(tables)))
	local, err := j.localReplica(ctx)
	if err != nil {
		return err
	}
	defer local.Close(context.Background())
	if _, err := donor.Exec(ctx, "COMMIT"); err != nil {
		return err
	}
	for i, t := range tables {
		began := time.Now()
		if err := begin(); err != nil {
			return err
		}
		nrows, nbytes, err := j.copyTable(ctx, donor.PgConn(), local.PgConn(), t)
		if err != nil {
			return fmt.Errorf("copy %s: %w", t.ident(), err)
		}
		if _, err := donor.Exec(ctx, "COMMIT"); err != nil {
			return err
		}
		j.res.Tables++
		j.m.tablesDone.Inc()
		j.progress("data: %d/%d tables: %s, %d rows, %s in %s", i+1, len(tables), t.ident(), nrows, size(nbytes), time.Since(began).Round(time.Millisecond))
	}

	j.m.enter("sequences")
	if err := begin(); err != nil {
		return err
	}
	srows, err := donor.Query(ctx, `SELECT format('%I.%I', schemaname, sequencename), last_value FROM pg_sequences
		WHERE last_value IS NOT NULL AND schemaname NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		return fmt.Errorf("read the donor's sequences: %w", err)
	}
	type seq struct {
		name string
		v    int64
	}
	var seqs []seq
	for srows.Next() {
		var s seq
		if err := srows.Scan(&s.name, &s.v); err != nil {
			return err
		}
		seqs = append(seqs, s)
	}
	if err := srows.Err(); err != nil {
		return fmt.Errorf("read the donor's sequences: %w", err)
	}
	for _, s := range seqs {
		// The node moves each into its own residue class when it starts
		// (sequences.NormalizeSQL).
		if _, err := local.Exec(ctx, "SELECT setval($1::regclass, $2, true)", s.name, s.v); err != nil {
			return fmt.Errorf("set sequence %s: %w", s.name, err)
		}
	}
	j.progress("sequences: %d set", len(seqs))
	if err := j.copyLargeObjects(ctx, donor, local); err != nil {
		return err
	}
	_, err = donor.Exec(ctx, "COMMIT")
	return err
}

// copyLargeObjects copies every large object of the donor's snapshot (its
// owner, privileges, comment and content), one at a time: they live in
// system catalogs, which neither the schema dump nor the tables' COPY
// carries. The donor's transaction is open at the snapshot.
func (j *joiner) copyLargeObjects(ctx context.Context, donor, local *pgx.Conn) error {
	rows, err := donor.Query(ctx, `SELECT oid, pg_get_userbyid(lomowner), coalesce(lomacl::text, ''),
			obj_description(oid, 'pg_largeobject') IS NOT NULL, coalesce(obj_description(oid, 'pg_largeobject'), '')
		FROM pg_largeobject_metadata ORDER BY oid`)
	if err != nil {
		return fmt.Errorf("list the donor's large objects: %w", err)
	}
	type lo struct {
		oid                 uint32
		owner, acl, comment string
		hasComment          bool
	}
	var los []lo
	for rows.Next() {
		var l lo
		if err := rows.Scan(&l.oid, &l.owner, &l.acl, &l.hasComment, &l.comment); err != nil {
			return err
		}
		los = append(los, l)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list the donor's large objects: %w", err)
	}
	var total int64
	for i, l := range los {
		var acl, comment *string
		if l.acl != "" {
			acl = &l.acl
		}
		if l.hasComment {
			comment = &l.comment
		}
		if _, err := local.Exec(ctx, "SELECT _ordo.lo_set($1, $2, $3, $4, $5, true)", l.oid, l.owner, acl, l.hasComment, comment); err != nil {
			return fmt.Errorf("copy large object %d: %w", l.oid, err)
		}
		n, err := j.copyLargeObjectPages(ctx, donor, local, l.oid)
		if err != nil {
			return fmt.Errorf("copy large object %d: %w", l.oid, err)
		}
		total += n
		if (i+1)%1000 == 0 {
			j.progress("large objects: %d/%d, %s", i+1, len(los), size(total))
		}
	}
	j.progress("large objects: %d, %s", len(los), size(total))
	return nil
}

// copyLargeObjectPages copies the stored pages of one large object, in
// pieces of contiguous pages (a sparse object's holes stay holes; one of
// several gigabytes is copied a piece at a time), and returns the bytes
// copied.
func (j *joiner) copyLargeObjectPages(ctx context.Context, donor, local *pgx.Conn, oid uint32) (int64, error) {
	rows, err := donor.Query(ctx, `SELECT pageno::bigint * (current_setting('block_size')::int / 4), data
		FROM pg_largeobject WHERE loid = $1 ORDER BY pageno`, oid)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var lo capture.LargeObject
	var n int64
	put := func(p capture.LargeObjectPiece) error {
		_, err := local.Exec(ctx, "SELECT lo_put($1, $2, $3)", oid, p.Offset, p.Data)
		n += int64(len(p.Data))
		return err
	}
	for rows.Next() {
		var off int64
		var data []byte
		if err := rows.Scan(&off, &data); err != nil {
			return n, err
		}
		lo.AddStoredPage(off, data)
		// Write the pieces before the one still growing.
		for len(lo.Pieces) > 1 {
			if err := put(lo.Pieces[0]); err != nil {
				return n, err
			}
			lo.Pieces = lo.Pieces[1:]
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	end := int64(0)
	for _, p := range lo.Pieces {
		if err := put(p); err != nil {
			return n, err
		}
		end = p.Offset + int64(len(p.Data))
	}
	if lo.Size > end {
		if _, err := local.Exec(ctx, "SELECT _ordo.lo_size($1, $2)", oid, lo.Size); err != nil {
			return n, err
		}
	}
	return n, nil
}

// copyTable streams one table's rows (COPY text format: one line a row).
func (j *joiner) copyTable(ctx context.Context, donor, local *pgconn.PgConn, t table) (rows, nbytes int64, err error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// PostgreSQL sends a row a message, and pgconn writes each to the
		// pipe, where a handoff costs more than the row: batch them.
		bw := bufio.NewWriterSize(pw, 1<<20)
		_, err := donor.CopyTo(ctx, bw, "COPY "+t.ident()+" TO STDOUT")
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		done <- err
	}()
	cr := &counter{r: pr, m: j.m}
	_, err = local.CopyFrom(ctx, cr, "COPY "+t.ident()+" FROM STDIN")
	pr.CloseWithError(errors.New("the local COPY ended"))
	if derr := <-done; err == nil && derr != nil {
		err = derr
	}
	j.res.Rows += cr.rows
	j.res.Bytes += cr.bytes
	return cr.rows, cr.bytes, err
}

// counter counts the rows and bytes of a COPY stream as they pass.
type counter struct {
	r           io.Reader
	m           *metrics
	rows, bytes int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		nl := int64(bytes.Count(p[:n], []byte{'\n'}))
		c.rows += nl
		c.bytes += int64(n)
		c.m.rows.Add(float64(nl))
		c.m.bytes.Add(float64(n))
	}
	return n, err
}

// restoreRoles runs pg_dumpall --roles-only's statements, one at a time;
// a role that exists already is altered by the statements after its
// CREATE ROLE.
func (j *joiner) restoreRoles(ctx context.Context, script []byte) (int, error) {
	conn, err := j.localReplica(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "--") || strings.HasPrefix(line, `\`) || strings.HasPrefix(line, "SET ") {
			continue
		}
		if _, err := conn.Exec(ctx, line); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42710" { // duplicate_object: the role exists
				continue
			}
			return n, fmt.Errorf("roles: %.80s: %w", line, err)
		}
		n++
	}
	return n, sc.Err()
}

// listSettings are the settings whose stored value is a list PostgreSQL
// quotes element by element (GUC_LIST_QUOTE): set as stored, not as one
// string literal.
var listSettings = map[string]bool{"search_path": true, "temp_tablespaces": true,
	"session_preload_libraries": true, "local_preload_libraries": true, "shared_preload_libraries": true}

// copyDatabaseSettings copies the donor database's settings (ALTER
// DATABASE … SET, and ALTER ROLE … IN DATABASE … SET; a role's settings
// for every database come with the roles) to the local database, which
// may have another name. It returns how many it set.
func (j *joiner) copyDatabaseSettings(ctx context.Context, donorDSN string) (int, error) {
	donor, err := pgx.Connect(ctx, donorDSN)
	if err != nil {
		return 0, fmt.Errorf("database settings: %w", err)
	}
	defer donor.Close(context.Background())
	rows, err := donor.Query(ctx, `SELECT coalesce(r.rolname, ''), s.setconfig
		FROM pg_db_role_setting s LEFT JOIN pg_roles r ON r.oid = s.setrole
		WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY 1`)
	if err != nil {
		return 0, fmt.Errorf("database settings: %w", err)
	}
	type setting struct{ role, name, value string }
	var all []setting
	for rows.Next() {
		var role string
		var config []string
		if err := rows.Scan(&role, &config); err != nil {
			return 0, fmt.Errorf("database settings: %w", err)
		}
		for _, c := range config {
			name, value, _ := strings.Cut(c, "=")
			all = append(all, setting{role, name, value})
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("database settings: %w", err)
	}
	if len(all) == 0 {
		return 0, nil
	}
	local, err := j.localReplica(ctx)
	if err != nil {
		return 0, err
	}
	defer local.Close(context.Background())
	var db string
	if err := local.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return 0, fmt.Errorf("database settings: %w", err)
	}
	for _, s := range all {
		value := quoteLiteral(s.value)
		if listSettings[s.name] {
			value = s.value
		}
		target := "DATABASE " + pgx.Identifier{db}.Sanitize()
		if s.role != "" {
			target = "ROLE " + pgx.Identifier{s.role}.Sanitize() + " IN " + target
		}
		q := "ALTER " + target + " SET " + s.name + " = " + value
		if _, err := local.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("database settings: %s: %w", q, err)
		}
	}
	return len(all), nil
}

// tool runs one of PostgreSQL's client programs and returns its output.
func (j *joiner) tool(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	path := name
	if j.cfg.BinDir != "" {
		path = filepath.Join(j.cfg.BinDir, name)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteKV(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
