package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestSessionMessageSequences is a model client sending random sequences
// of Parse, Bind, Describe, Execute, Close, Sync and Query (single
// statements and strings of several, with and without transaction
// control) to a node and to a plain PostgreSQL server side by side: the
// replies must match, message by message (notices and parameter statuses
// aside), and the table must end the same. ORDO_SESSION_FUZZ_ROUNDS runs
// more rounds (default 60), ORDO_SESSION_FUZZ_SEED another seed,
// ORDO_SESSION_FUZZ_PROTOCOL another protocol (default dbsm).
func TestSessionMessageSequences(t *testing.T) {
	t.Parallel()
	protocol := "dbsm"
	if v := os.Getenv("ORDO_SESSION_FUZZ_PROTOCOL"); v != "" {
		protocol = v
	}
	fuzzSessions(t, protocol, false)
}

// TestSessionMessageSequencesWithTemporaryTables: the same in a session
// with a temporary table, whose transactions are probed apart (the full
// probe, alone when they changed rows): blocks and batches that write
// only the temporary table, or read the replicated one beside it, commit
// on the node alone as on PostgreSQL; between them, when the session is
// idle, autocommit writes of the replicated table (a query, a unit of
// the extended protocol, the fast path, a COPY), which are replicated.
// (Never the two in one transaction: Ordo refuses that, PostgreSQL does
// not: compatibility.md.) Default protocol dbsm-rc, whose probes read
// the committed prefix too; ORDO_SESSION_FUZZ_PROTOCOL chooses another.
func TestSessionMessageSequencesWithTemporaryTables(t *testing.T) {
	t.Parallel()
	protocol := "dbsm-rc"
	if v := os.Getenv("ORDO_SESSION_FUZZ_PROTOCOL"); v != "" && v != "cons" {
		protocol = v
	}
	fuzzSessions(t, protocol, true)
}

// TestSessionMessageSequencesUnderCons: the same under cons, whose
// blocks declare their classes in a comment on BEGIN.
func TestSessionMessageSequencesUnderCons(t *testing.T) {
	t.Parallel()
	fuzzSessions(t, "cons", false)
}

// TestSessionFuzzerSeeds replays seeds of the fuzzers that found a
// difference no other test reaches, each for as many rounds as it took:
// a query string that created an existing temporary table IF NOT EXISTS,
// then ran an EXECUTE (which Ordo takes for a statement that may write,
// so the string ran in its block): the block lost the temporary table,
// and PostgreSQL refused Ordo's PREPARE (round 23).
func TestSessionFuzzerSeeds(t *testing.T) {
	t.Parallel()
	runFuzzSessions(t, "pgr", true, 1796181126423773066, 30, false)
	// A COMMIT AND CHAIN the name held after a DEALLOCATE in an earlier
	// batch, bound after a failed block's ROLLBACK where the session could
	// not read the names back: taken for a statement that may do anything,
	// it ran in a block of Ordo's and completed (round 54).
	runFuzzSessions(t, "dbsm", true, 1796187667502551099, 60, false)
}

// fuzzSessions runs the model client under protocol; temp: in a session
// with a temporary table (TestSessionMessageSequencesWithTemporaryTables).
func fuzzSessions(t *testing.T, protocol string, temp bool) {
	rounds := 60
	if v, err := strconv.Atoi(os.Getenv("ORDO_SESSION_FUZZ_ROUNDS")); err == nil {
		rounds = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("ORDO_SESSION_FUZZ_SEED"), 10, 64); err == nil {
		seed = v
	}
	runFuzzSessions(t, protocol, temp, seed, rounds, true)
}

// runFuzzSessions runs the model client for rounds from seed.
// leaves: statements bound into named portals are sometimes left
// unexecuted (fuzzModel.leaves).
func runFuzzSessions(t *testing.T, protocol string, temp bool, seed uint64, rounds int, leaves bool) {
	t.Logf("seed %d (ORDO_SESSION_FUZZ_SEED), %d rounds, protocol %s, temporary table %v", seed, rounds, protocol, temp)
	m := fuzzModel{begin: "begin", stmts: fuzzStatements}
	if leaves {
		m.leaves = rand.New(rand.NewPCG(seed, 2))
		m.mid = rand.New(rand.NewPCG(seed, 3))
		m.ends = rand.New(rand.NewPCG(seed, 4))
		m.ctl = rand.New(rand.NewPCG(seed, 5))
	}
	if protocol == "cons" {
		// A block declares its classes (every one); a statement outside
		// a block gets its own from the analyzer, and a PL/pgSQL
		// function may read any table: a string's statement calling
		// fz_note after one that gave the block its classes is refused
		// (protocols.md), which PostgreSQL would run.
		m.begin = "/* ordo.conflict_classes: * */ begin"
		m.stmts = slices.DeleteFunc(slices.Clone(m.stmts), func(s fuzzStatement) bool { return strings.Contains(s.sql, "fz_note") })
	}
	if temp {
		m.stmts, m.temp = fuzzTempStatements(), true
	}
	if protocol == "dbsm-rc" {
		// Under dbsm-rc every block runs at the level it asks for,
		// SERIALIZABLE included (protocols.md, "SERIALIZABLE on demand"),
		// and no SHOW is rewritten: PostgreSQL compares a level asked for
		// inside a block with the one running as it would without Ordo.
		// (Under dbsm-si a SHOW answered by a SELECT takes a snapshot,
		// which a level asked for after it would meet: compatibility.md.)
		m.stmts = append(slices.Clone(m.stmts), fuzzStatement{"begin isolation level serializable", 0},
			fuzzStatement{"set transaction isolation level serializable", 0})
	}
	sb := startSideBySide(t, protocol)
	ctx := context.Background()
	o, p := sb.conns(t)
	var version int
	require.NoError(t, p.QueryRow(ctx, "select current_setting('server_version_num')::int").Scan(&version))
	m.pg18 = version >= 180000
	for _, c := range []*pgconn.PgConn{o.PgConn(), p.PgConn()} {
		_, err := c.Exec(ctx, "create table fz(k int primary key, v int not null)").ReadAll()
		require.NoError(t, err)
		_, err = c.Exec(ctx, "create function fz_bump(int) returns int language sql as 'with u as (update fz set v = v + 1 where k = $1 returning v) select coalesce((select v from u), -1)'").ReadAll()
		require.NoError(t, err)
		_, err = c.Exec(ctx, "create view fz_bumped as select fz_bump(1) as v").ReadAll()
		require.NoError(t, err)
		_, err = c.Exec(ctx, "create function fz_note(int) returns int language plpgsql stable as $$ begin raise notice 'fz-note %', $1; return $1; end $$").ReadAll()
		require.NoError(t, err)
	}
	// (Never NULL: pgproto3 cannot decode a NULL FunctionCallResponse.)
	// The function's OID is each server's own: a FunctionCall of it is
	// sent to each with its OID (fzBumpOID stands for it).
	bumpOID := func(c *pgconn.PgConn) uint32 {
		res, err := c.Exec(ctx, "select 'fz_bump'::regproc::oid").ReadAll()
		require.NoError(t, err)
		o, err := strconv.ParseUint(string(res[0].Rows[0][0]), 10, 32)
		require.NoError(t, err)
		return uint32(o)
	}
	ordoBump, plainBump := bumpOID(o.PgConn()), bumpOID(p.PgConn())
	ordo, plain := sb.hijacked(t)
	if temp {
		for _, h := range []*pgconn.HijackedConn{ordo, plain} {
			require.Equal(t, "Complete CREATE TABLE\nReady I\n", exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: fztCreate}}))
		}
	}
	// ORDO_SESSION_FUZZ_TRACE prints each round with the time it ended
	// and PostgreSQL's replies;
	// ORDO_SESSION_FUZZ_PGLOG=file (with ORDO_TEST_PG_LOG_STATEMENTS=1)
	// keeps node 1's PostgreSQL log there when a round fails.
	trace := os.Getenv("ORDO_SESSION_FUZZ_TRACE") != ""
	keepLog := func() {
		if d := os.Getenv("ORDO_SESSION_FUZZ_PGLOG"); d != "" {
			time.Sleep(200 * time.Millisecond)
			b, _ := os.ReadFile(sb.c.pg.Servers[0].LogFile)
			_ = os.WriteFile(d, b, 0o644)
			if b, err := os.ReadFile(sb.plain.Servers[0].LogFile); err == nil {
				_ = os.WriteFile(d+".plain", b, 0o644)
			}
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			keepLog() // (an error inside an exchange too)
		}
	})
	// Roles, which no event trigger sees: Ordo replays their statements
	// as the session followed them, savepoints included.
	roles := func(c *pgx.Conn) string {
		var r string
		require.NoError(t, c.QueryRow(ctx, "select coalesce(string_agg(rolname, ',' order by rolname), '') from pg_roles where rolname like 'fzr%'").Scan(&r))
		return r
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var recent []string
	// failed: the last unit left a failed block. PostgreSQL then keeps
	// the block's portals but frees what some of them point at, and an
	// Execute of one can crash the server (through a node, Ordo answers
	// it: TestExecuteOfADeadPortalIsAnsweredByOrdo): the model client
	// executes no portal of an earlier unit there.
	failed := false
	idle := true // the last reply's ReadyForQuery said I
	for r := 0; r < rounds; r++ {
		m.idle = idle
		msgs, text := randomUnit(rng, m)
		ex := exchange
		switch {
		case m.temp && idle && rng.IntN(4) == 0:
			msgs, text = randomReplicatedWrite(rng)
		case rng.IntN(8) == 0 && (!m.temp || idle):
			msgs, text = randomCopy(rng)
			ex = exchangeMarked
		}
		if _, ok := msgs[0].(*pgproto3.Execute); ok && failed {
			continue
		}
		if q, ok := midQuery(m, msgs, !idle); ok && !strings.Contains(text, " bound, not executed") {
			msgs, text = q, text+" (with a Query inside: "+q[len(q)-1].(*pgproto3.Query).String+")"
			msgs[len(msgs)-1] = &pgproto3.Query{String: markerQuery}
			ex = exchangeMarked
		}
		if trace {
			fmt.Fprintf(os.Stderr, "FZ sending round %d: %s\n", r, text)
		}
		want := ex(t, plain, withOID(msgs, plainBump))
		got := ex(t, ordo, withOID(msgs, ordoBump))
		if e, ok := msgs[0].(*pgproto3.Execute); ok && e.Portal == "" {
			// An unnamed portal that ran to its end in a block is gone
			// once Ordo ran a statement of its own there
			// (compatibility.md): its Execute is answered 34000 where
			// PostgreSQL says 55000.
			gone := `Error ERROR 34000 portal "" does not exist`
			want = strings.Replace(want, `Error ERROR 55000 portal "" cannot be run`, gone, 1)
			got = strings.Replace(got, `Error ERROR 55000 portal "" cannot be run`, gone, 1)
		}
		if want != got {
			keepLog()
		}
		require.Equal(t, want, got, "round %d (seed %d): %s", r, seed, text)
		failed = strings.HasSuffix(want, "Ready E\n")
		idle = strings.HasSuffix(want, "Ready I\n")
		recent = append(recent, fmt.Sprintf("round %d: %s", r, text))
		if trace {
			fmt.Fprintf(os.Stderr, "FZ %s round %d: %s\n%s", time.Now().Format("15:04:05.000"), r, text, indent(want))
		}
		if len(recent) > 8 {
			recent = recent[1:]
		}
		if sb.c.unreplicated(0) > 0 {
			keepLog()
		}
		// The decoder reports a commit that bypassed Ordo soon after.
		require.Zero(t, sb.c.unreplicated(0), "seed %d, after:\n%s", seed, strings.Join(recent, "\n"))
		if idle && r%10 == 9 {
			// The roles every tenth round the session stands idle: a
			// later statement of the one name would hide a difference.
			sb.c.waitConverged()
			want := roles(p)
			for i := range sb.c.nodes {
				require.Equal(t, want, roles(sb.c.direct(i)), "the roles on node %d, round %d (seed %d), after:\n%s", i+1, r, seed, strings.Join(recent, "\n"))
			}
		}
	}
	for _, h := range []*pgconn.HijackedConn{ordo, plain} {
		exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "rollback"}})
	}
	sum := func(c *pgconn.PgConn) string {
		res, err := c.Exec(ctx, "select coalesce(string_agg(k || '=' || v, ',' order by k), '') from fz").ReadAll()
		require.NoError(t, err)
		return string(res[0].Rows[0][0])
	}
	require.Equal(t, sum(p.PgConn()), sum(o.PgConn()))
	if temp {
		// The temporary table's rows, in the sessions that have it.
		q := []pgproto3.FrontendMessage{&pgproto3.Query{String: "select coalesce(string_agg(k || '=' || v, ',' order by k), '') from fzt"}}
		want := exchange(t, plain, q)
		t.Logf("the temporary table at the end: %s", strings.ReplaceAll(want, "\n", "; "))
		require.Equal(t, want, exchange(t, ordo, q))
	}
	sb.c.waitConverged()
	require.Equal(t, sb.c.checksum(0, "fz"), sb.c.checksum(1, "fz"))
	require.Zero(t, sb.c.unreplicated(0))
	want := roles(p)
	for i := range sb.c.nodes {
		require.Equal(t, want, roles(sb.c.direct(i)), "the roles on node %d (seed %d)", i+1, seed)
	}
}

// fuzzStatement is a statement of the model client's, with its number of
// parameters.
type fuzzStatement struct {
	sql    string
	params int
}

// fuzzModel is what the model client sends: begin is the text of BEGIN
// (under cons, with a declaration), stmts the statements it picks from,
// temp whether the session has a temporary table (then the fast path
// calls only abs, and a unit writes no replicated table).
type fuzzModel struct {
	begin string
	stmts []fuzzStatement
	temp  bool
	// leaves: a statement bound into a named portal is sometimes left
	// unexecuted (drawn from a second generator, so a seed's other
	// choices are those it made before this was added); off for the
	// seeds TestSessionFuzzerSeeds replays, which found what they found
	// without it.
	leaves *rand.Rand
	// mid: a simple Query is sometimes sent inside an extended-protocol
	// batch of reads (midQuery; a third generator, off for the replayed
	// seeds too).
	mid *rand.Rand
	// pg18: the server is PostgreSQL 18 or later. 18.6 answers what
	// follows a batch in which a Query ran outside a block wrongly (it
	// reports the Query's status as 'T', and fails the next Query with
	// XX000: compatibility.md), so its answers are no reference there:
	// on it a Query inside a batch is sent only in a block.
	pg18 bool
	// ends: a ROLLBACK that ends an extended-protocol batch, or such a
	// COMMIT outside a block, is sometimes bound and not executed (a
	// fourth generator, off for the replayed seeds); idle: the last unit left no block (set
	// before each randomUnit).
	ends *rand.Rand
	idle bool
	// ctl: a ROLLBACK, SAVEPOINT, RELEASE or ROLLBACK TO is sometimes
	// bound into a named portal, and sometimes left there for a later
	// unit's Execute, or none (a fifth generator, off for the replayed
	// seeds): PostgreSQL runs it at its Execute.
	ctl *rand.Rand
}

// midQuery sometimes puts a simple Query inside msgs, an extended-protocol
// unit of statements parsed in it (no Flush): PostgreSQL runs it there,
// or skips it after an error of the batch. After an update outside a
// block it commits the batch so far, which Ordo refuses (compatibility.md),
// so before it only reads, or, in a block (failed or not), statements
// that do not end it. Its ReadyForQuery ends the batch as a Sync would:
// what follows it, up to the Sync, may be anything (a BEGIN there makes
// the batch so far a block). Sometimes a failing Query comes first (its error makes PostgreSQL skip nothing). It
// returns the messages with the Query's text last, where the caller
// puts the marker.
func midQuery(m fuzzModel, msgs []pgproto3.FrontendMessage, inBlock bool) ([]pgproto3.FrontendMessage, bool) {
	if m.mid == nil || len(msgs) < 3 || m.mid.IntN(2) != 0 || m.pg18 && !inBlock {
		return nil, false
	}
	if _, ok := msgs[len(msgs)-1].(*pgproto3.Sync); !ok {
		return nil, false
	}
	at := 1 + m.mid.IntN(len(msgs)-1)
	parsed := map[string]bool{}
	for i, msg := range msgs[:len(msgs)-1] {
		switch msg := msg.(type) {
		case *pgproto3.Parse:
			verb := strings.Fields(msg.Query + " x")[0]
			read := verb == "select" && !strings.Contains(msg.Query, "for update") && !strings.Contains(msg.Query, "fz_bump")
			dml := slices.Contains([]string{"select", "insert", "update", "delete"}, verb)
			if i < at && !read && (!inBlock || !dml) {
				// In a block that stays one, an update is no commit.
				// (SQL's PREPARE, DEALLOCATE and DISCARD in the batch
				// leave statement names Ordo cannot read before the
				// Query, which it refuses: compatibility.md.)
				return nil, false
			}
			parsed[msg.Name] = true
		case *pgproto3.Bind:
			if i < at && !parsed[msg.PreparedStatement] {
				return nil, false // a statement from before: it may write
			}
		case *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Close:
		default:
			return nil, false // a Flush, a Sync, a Query, COPY
		}
	}
	// (Not empty: the marker is. The last two hold transaction control
	// among other statements, which Ordo runs as pieces.)
	q := []string{"select count(*) from fz", "select 1/0", "select v from fz where k = 2; select 3", "begin",
		"begin; select count(*) from fz; commit", "select v from fz where k = 3; commit"}[m.mid.IntN(6)]
	if q == "begin; select count(*) from fz; commit" && m.begin != "begin" {
		q = "select count(*) from fz"
	}
	if q == "begin" && m.begin != "begin" {
		// Under cons a BEGIN after a read of its batch is refused
		// (its snapshot would predate its classes: compatibility.md).
		q = "select count(*) from fz"
	}
	queries := []pgproto3.FrontendMessage{&pgproto3.Query{String: q}}
	if m.mid.IntN(4) == 0 {
		queries = slices.Insert(queries, 0, pgproto3.FrontendMessage(&pgproto3.Query{String: "select 1/0"}))
	}
	out := slices.Concat(msgs[:at], queries, msgs[at:])
	return append(out, &pgproto3.Query{String: q}), true
}

// fuzzStatements are the statements the model client sends, with their
// number of parameters.
var fuzzStatements = []fuzzStatement{
	{"select v from fz where k = $1", 1},
	{"select count(*) from fz", 0},
	{"insert into fz values ($1, $2)", 2},
	{"insert into fz values ($1, $2) on conflict (k) do update set v = excluded.v", 2},
	{"update fz set v = v + 1 where k = $1", 1},
	{"delete from fz where k = $1", 1},
	{"begin", 0},
	{"commit", 0},
	{"rollback", 0},
	{"savepoint s", 0},
	{"rollback to savepoint s", 0},
	{"select 1/0", 0},
	{"selec broken", 0},
	{"update fz set v = v + 1 where k = $1 returning v", 1},
	{"select v from fz where k = $1 for update", 1},
	{"show transaction_isolation", 0},
	{"release savepoint s", 0},
	{"commit and chain", 0},
	// (Not BEGIN ISOLATION LEVEL inside a block nor SET TRANSACTION
	// after a query: Ordo's blocks run at REPEATABLE READ, and PostgreSQL
	// compares the level asked for with the one running; compatibility.md.)
	{"start transaction", 0},
	{"show default_transaction_isolation", 0},
	{"set local work_mem = '1MB'", 0},
	{"lock table fz in share mode", 0},
	{"update fz set v = v + 1", 0},
	{"insert into fz values ($1, $2) returning k", 2},
	{"declare c cursor for select k from fz order by k", 0},
	{"fetch 1 from c", 0},
	{"close c", 0},
	// Labels and Ordo's settings: what Ordo does with them (a label read
	// by the write probe and reset with the PREPARE, or reset once a
	// failed block is over) must not show in the replies.
	{"set ordo.txn_label = 'fz-1'", 0},
	{"set local ordo.txn_label = 'fz-2'", 0},
	{"select set_config('ordo.txn_label', 'fz-3', false)", 0},
	{"select set_config('ordo.read_consistency', 'local', false)", 0},
	// SQL-level prepared statements (the session sees only EXECUTE's
	// text), DEALLOCATE ALL and DISCARD ALL (which drop the client's named
	// statements under Ordo's knowledge of them), and schema changes, some
	// of which a later ROLLBACK undoes.
	{"prepare pu(int) as update fz set v = v + 1 where k = $1", 0},
	{"execute pu($1)", 1},
	{"prepare ps(int) as select v from fz where k = $1", 0},
	{"execute ps($1)", 1},
	{"deallocate pu", 0},
	{"deallocate fz0", 0},
	{"deallocate all", 0},
	{"discard all", 0},
	{"truncate fz", 0},
	{"alter table fz add column if not exists x int", 0},
	{"alter table fz drop column if exists x", 0},
	{"create index if not exists fz_v on fz(v)", 0},
	{"drop index if exists fz_v", 0},
	// Rows to suspend a portal in (an Execute with a row limit), and a
	// statement prepared by a DO block, which no PREPARE tag announces,
	// under a name the protocol's statements use too.
	{"select k from fz order by k", 0},
	{"do $$ begin execute 'prepare fz1 as update fz set v = v + 1 where k = 1'; end $$", 0},
	// A read that writes (a view calling a volatile function that does),
	// and a change of search path before statements of its query string.
	{"select v from fz_bumped", 0},
	{"set search_path = public", 0},
	// Statements no event trigger sees, which Ordo replays as sent and
	// which follow savepoints (a SAVEPOINT PostgreSQL skipped was
	// followed: a role rolled back on the origin was created elsewhere).
	{"create role fzr", 0},
	{"drop role if exists fzr", 0},
	// Notices of PostgreSQL's among a statement's replies (a read's, a
	// write's whose row Ordo holds until its commit, a DO block's), and
	// a statement PostgreSQL warns of outside a block.
	{"select fz_note($1)", 1},
	{"update fz set v = fz_note(v) where k = $1 returning v", 1},
	{"update fz set v = fz_note(v) where k < 4 returning v", 0},
	{"do $$ begin raise warning 'fz-warning'; end $$", 0},
	{"set constraints all deferred", 0},
}

// fztCreate creates the model client's temporary table.
const fztCreate = "create temp table if not exists fzt(k int primary key, v int not null)"

// fuzzTempStatements are the statements the model client sends in a
// session with a temporary table: those of fuzzStatements that write no
// replicated table nor prepare a statement that does (the fast path's
// fz_bump is not sent there either), and statements on the temporary
// table fzt, which one of them drops and another creates again.
// randomReplicatedWrite's units write the replicated table in between.
func fuzzTempStatements() []fuzzStatement {
	var out []fuzzStatement
	for _, s := range fuzzStatements {
		w := strings.Fields(s.sql)[0]
		switch {
		case slices.Contains([]string{"insert", "update", "delete", "truncate", "alter", "create", "drop", "do", "lock"}, w),
			strings.HasPrefix(s.sql, "execute pu"), strings.HasPrefix(s.sql, "prepare pu"), strings.HasSuffix(s.sql, "for update"),
			strings.Contains(s.sql, "fz_bumped"):
			// (PREPARE of an UPDATE takes the lock the UPDATE would, and
			// a transaction holding a write lock on a replicated table
			// counts as writing it: compatibility.md.)
			continue
		}
		out = append(out, s)
	}
	return append(out,
		fuzzStatement{fztCreate, 0},
		fuzzStatement{"drop table if exists fzt", 0},
		fuzzStatement{"insert into fzt values ($1, $2) on conflict (k) do update set v = excluded.v", 2},
		fuzzStatement{"update fzt set v = v + 1 where k = $1 returning v", 1},
		fuzzStatement{"delete from fzt where k = $1", 1},
		fuzzStatement{"select v from fzt where k = $1", 1},
		fuzzStatement{"insert into fzt select k, v from fz where k = $1 on conflict (k) do nothing", 1},
		fuzzStatement{"truncate fzt", 0},
		fuzzStatement{"declare ct cursor for select k from fzt order by k", 0},
		fuzzStatement{"fetch 1 from ct", 0},
	)
}

// randomReplicatedWrite returns an autocommit write of the replicated
// table, for a session with a temporary table to send while idle: one or
// two statements as a simple Query (one implicit transaction), one
// unnamed statement's Parse, Bind and Execute with its Sync, or the fast
// path's fz_bump.
func randomReplicatedWrite(rng *rand.Rand) ([]pgproto3.FrontendMessage, string) {
	writes := []fuzzStatement{
		{"insert into fz values ($1, $2)", 2},
		{"insert into fz values ($1, $2) on conflict (k) do update set v = excluded.v", 2},
		{"update fz set v = v + 1 where k = $1", 1},
		{"update fz set v = v + 1 where k = $1 returning v", 1},
		{"delete from fz where k = $1", 1},
	}
	param := func() []byte { return []byte(strconv.Itoa(rng.IntN(6))) }
	switch rng.IntN(3) {
	case 0:
		arg := param()
		return []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: fzBumpOID, ArgFormatCodes: []uint16{0},
			Arguments: [][]byte{arg}, ResultFormatCode: 0}}, fmt.Sprintf("FunctionCall fz_bump(%s)", arg)
	case 1:
		var parts []string
		for i, n := 0, 1+rng.IntN(2); i < n; i++ {
			w := writes[rng.IntN(len(writes))]
			sql := w.sql
			for j := w.params; j >= 1; j-- {
				sql = strings.ReplaceAll(sql, "$"+strconv.Itoa(j), string(param()))
			}
			parts = append(parts, sql)
		}
		q := strings.Join(parts, "; ")
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: q}}, "Query " + q
	}
	w := writes[rng.IntN(len(writes))]
	var params [][]byte
	for range w.params {
		params = append(params, param())
	}
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: w.sql}, &pgproto3.Bind{Parameters: params}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Sync{}}, fmt.Sprintf("Parse %q %s; Bind %q; Execute; Sync", "", w.sql, params)
}

// fzBumpOID stands for the OID of fz_bump(int), an SQL function that
// updates a row, in a FunctionCall: withOID puts each server's in.
const fzBumpOID = 0xfffffff0

// withOID returns msgs with the FunctionCalls of fzBumpOID calling oid.
func withOID(msgs []pgproto3.FrontendMessage, oid uint32) []pgproto3.FrontendMessage {
	out := make([]pgproto3.FrontendMessage, len(msgs))
	for i, m := range msgs {
		if f, ok := m.(*pgproto3.FunctionCall); ok && f.Function == fzBumpOID {
			c := *f
			c.Function = oid
			m = &c
		}
		out[i] = m
	}
	return out
}

// declare gives a BEGIN or START TRANSACTION the text of begin's
// declaration (under cons).
func declare(sql, begin string) string {
	if strings.HasPrefix(sql, "begin") || strings.HasPrefix(sql, "start") {
		return strings.TrimSuffix(begin, "begin") + sql
	}
	return sql
}

// randomUnit returns a random sequence of client messages ending with a
// Sync or a Query, and a description of it.
// begin is the text of BEGIN. Under cons (a BEGIN with a declaration),
// no update or BEGIN follows a read in one batch, and there is no DDL:
// cons refuses those (its snapshot would predate its classes; DDL needs
// every class declared), PostgreSQL does not.
func randomUnit(rng *rand.Rand, m fuzzModel) ([]pgproto3.FrontendMessage, string) {
	var msgs []pgproto3.FrontendMessage
	var desc []string
	begin := m.begin
	cons := begin != "begin"
	read := false
	picked := 0
	pick := func() (string, int) {
		for {
			s := m.stmts[rng.IntN(len(m.stmts))]
			ddl := strings.HasPrefix(s.sql, "truncate") || strings.HasPrefix(s.sql, "alter") ||
				strings.HasPrefix(s.sql, "create") || strings.HasPrefix(s.sql, "drop")
			if cons && ddl {
				// cons refuses DDL in a transaction that took classes
				// other than every one ('*'), which a block begun by
				// COMMIT AND CHAIN or a batch may have; PostgreSQL
				// does not.
				continue
			}
			if cons && (strings.HasPrefix(s.sql, "execute") || strings.HasPrefix(s.sql, "do ") || strings.Contains(s.sql, "fz_bumped") ||
				strings.HasPrefix(s.sql, "set search_path")) {
				// EXECUTE, a view calling a volatile function, and a
				// statement after a SET of search_path bound in its batch
				// (which the session cannot follow) may touch every class:
				// cons refuses them in a transaction that declared fewer
				// (compatibility.md).
				continue
			}
			picked++
			locks := strings.HasSuffix(s.sql, "for update") || strings.HasPrefix(s.sql, "lock")
			// (A SHOW of the isolation level is answered by a SELECT:
			// a read, under cons too.)
			// (PREPARE, DEALLOCATE, DISCARD and CLOSE take a snapshot
			// as a read does.)
			isRead := (strings.HasPrefix(s.sql, "select") || strings.HasPrefix(s.sql, "declare") || strings.HasPrefix(s.sql, "fetch") ||
				strings.HasPrefix(s.sql, "show") || strings.HasPrefix(s.sql, "prepare") || strings.HasPrefix(s.sql, "deallocate") ||
				strings.HasPrefix(s.sql, "discard") || strings.HasPrefix(s.sql, "close")) && !locks
			if cons && read && !isRead && (strings.HasPrefix(s.sql, "begin") || strings.HasPrefix(s.sql, "start") || strings.HasPrefix(s.sql, "insert") ||
				strings.HasPrefix(s.sql, "update") || strings.HasPrefix(s.sql, "delete") || strings.HasPrefix(s.sql, "execute") ||
				strings.HasPrefix(s.sql, "truncate") || strings.HasPrefix(s.sql, "alter") || strings.HasPrefix(s.sql, "create") ||
				strings.HasPrefix(s.sql, "drop") || locks) {
				continue
			}
			read = read || isRead
			return s.sql, s.params
		}
	}
	param := func() []byte { return []byte(strconv.Itoa(rng.IntN(6))) }
	switch rng.IntN(12) {
	case 0:
		// The fast path: abs(integer) (1397, the same OID everywhere),
		// or fz_bump, which updates a row (not under cons: a volatile
		// function may touch every class, which a transaction that
		// declared fewer refuses).
		fn, desc := uint32(1397), "abs"
		if !cons && !m.temp && rng.IntN(2) == 0 {
			fn, desc = fzBumpOID, "fz_bump"
		}
		arg := param()
		return []pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: fn, ArgFormatCodes: []uint16{0},
			Arguments: [][]byte{arg}, ResultFormatCode: 0}}, fmt.Sprintf("FunctionCall %s(%s)", desc, arg)
	case 1:
		// More rows of a portal suspended in a block (or one that is
		// gone), as a cursor through the protocol.
		portal := ""
		if rng.IntN(2) == 0 {
			portal = "p" + strconv.Itoa(rng.IntN(2))
		}
		rows := uint32(rng.IntN(3))
		return []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: portal, MaxRows: rows}, &pgproto3.Sync{}},
			fmt.Sprintf("Execute %q (%d rows) from before; Sync", portal, rows)
	}
	if rng.IntN(3) == 0 {
		// A simple query: one statement or several.
		n := 1 + rng.IntN(4)
		var parts []string
		for i := 0; i < n; i++ {
			sql0, params := pick()
			sql := declare(sql0, begin)
			for j := params; j >= 1; j-- {
				sql = strings.ReplaceAll(sql, "$"+strconv.Itoa(j), string(param()))
			}
			parts = append(parts, sql)
		}
		q := strings.Join(parts, "; ")
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: q}}, "Query " + q
	}
	// Extended protocol: up to four statements, each Parse (unnamed, or
	// named, sometimes closed after), Bind, Describe, Execute; sometimes a
	// Parse alone, bound in a later unit (the unnamed statement must
	// survive), or a Bind of what a name holds from before.
	n := 1 + rng.IntN(4)
	for i := 0; i < n; i++ {
		var s fuzzStatement
		s.sql, s.params = pick()
		if m.ctl != nil && m.ctl.IntN(8) == 0 {
			// More transaction control, for ctl's portals.
			s = fuzzStatement{[]string{"rollback", "savepoint s", "release savepoint s", "rollback to savepoint s", "rollback and chain"}[m.ctl.IntN(5)], 0}
		}
		name := ""
		if rng.IntN(3) == 0 {
			name = "fz" + strconv.Itoa(i)
		}
		if rng.IntN(5) > 0 || (cons && read) {
			msgs = append(msgs, &pgproto3.Parse{Name: name, Query: declare(s.sql, begin)})
			desc = append(desc, fmt.Sprintf("Parse %q %s", name, s.sql))
		} else {
			// Bind whatever the statement of that name is (a named one
			// left open, or whose Parse was refused because it was).
			desc = append(desc, fmt.Sprintf("(%q from before)", name))
			s.params = -1
			read = true // it may be
		}
		if s.params >= 0 && rng.IntN(6) == 0 {
			continue // prepared only
		}
		var params [][]byte
		for j := 0; j < max(s.params, 0); j++ {
			params = append(params, param())
		}
		if s.params < 0 {
			params = nil
		}
		// A named portal or a row limit only for a statement of this
		// unit that is no transaction control (compatibility.md: Ordo
		// commits at a COMMIT's Bind, which PostgreSQL refuses into a
		// portal name in use).
		plain := s.params >= 0 && !slices.Contains([]string{"begin", "commit", "rollback", "savepoint", "release", "start"},
			strings.Fields(s.sql)[0])
		portal := ""
		if plain && rng.IntN(4) == 0 {
			portal = "p" + strconv.Itoa(rng.IntN(2))
		}
		ctl := s.params >= 0 && m.ctl != nil && slices.Contains([]string{"rollback", "savepoint", "release"}, strings.Fields(s.sql)[0]) &&
			m.ctl.IntN(2) == 0
		if ctl {
			portal = "p" + strconv.Itoa(m.ctl.IntN(2))
		}
		msgs = append(msgs, &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: name, Parameters: params})
		if rng.IntN(2) == 0 {
			msgs = append(msgs, &pgproto3.Describe{ObjectType: 'P', Name: portal})
		}
		var rows uint32
		if plain && rng.IntN(4) == 0 {
			rows = 1 + uint32(rng.IntN(2))
		}
		if portal != "" || rows > 0 {
			desc = append(desc, fmt.Sprintf("into portal %q, %d rows", portal, rows))
		}
		if ctl && i == n-1 && m.ctl.IntN(2) == 0 {
			// (Only the unit's last, as below; and no Query inside the
			// batch after it: midQuery.)
			desc = append(desc, "bound, not executed")
		} else if !ctl && portal != "" && i == n-1 && m.leaves != nil && m.leaves.IntN(4) == 0 {
			// Bound and left: executed by a later unit of its block, or
			// never (PostgreSQL runs a statement at its Execute). Only
			// the unit's last: a COMMIT bound after it in the batch is
			// refused (compatibility.md, cause 6).
			desc = append(desc, "not executed")
		} else {
			msgs = append(msgs, &pgproto3.Execute{Portal: portal, MaxRows: rows})
		}
		if name != "" && rng.IntN(2) == 0 {
			msgs = append(msgs, &pgproto3.Close{ObjectType: 'S', Name: name})
			desc = append(desc, fmt.Sprintf("Close %q", name))
		}
	}
	if end := unexecutedEnd(m, desc); end != "" {
		// PostgreSQL runs neither at its Bind
		// (TestCompatTransactionEndBoundNeverExecuted; a COMMIT only
		// outside the client's block, where Ordo, which ends its
		// transaction at the Bind, agrees).
		msgs = append(msgs, &pgproto3.Parse{Query: end}, &pgproto3.Bind{})
		desc = append(desc, "Parse "+end+" bound, not executed")
	}
	if executes(msgs) > 0 && rng.IntN(4) == 0 {
		// The client reads the Executes' results before it sends the
		// Sync (exchange): nothing may hold them until the Sync.
		msgs = append(msgs, &pgproto3.Flush{})
		desc = append(desc, "Flush, read")
	}
	msgs = append(msgs, &pgproto3.Sync{})
	return msgs, strings.Join(desc, "; ") + "; Sync"
}

// unexecutedEnd returns, now and then, a ROLLBACK or COMMIT to bind at
// the end of an extended-protocol unit and not execute (drawn from
// m.ends alone): a COMMIT only outside a block (the last unit left none,
// and no BEGIN comes before it in desc, nor a portal left unexecuted).
func unexecutedEnd(m fuzzModel, desc []string) string {
	if m.ends == nil || m.ends.IntN(5) != 0 {
		return ""
	}
	if m.ends.IntN(2) == 0 {
		return "rollback"
	}
	if !m.idle {
		return ""
	}
	for _, d := range desc {
		if strings.Contains(d, " begin") || strings.Contains(d, " start transaction") || strings.Contains(d, "from before") || strings.Contains(d, "not executed") {
			return ""
		}
	}
	return "commit"
}

// randomCopy returns one or two COPY FROM STDIN sent the way a client
// that does not wait for CopyInResponse sends them, with their data: as a
// simple Query (two in one string), or as Parse, Bind, Execute, sometimes
// with a Sync right after the Execute (ignored by PostgreSQL if the COPY
// starts, answered if it fails); into the table or a column it lacks;
// rows that may collide; each ended by CopyDone or CopyFail. The last
// message is a marker query (exchangeMarked).
func randomCopy(rng *rand.Rand) ([]pgproto3.FrontendMessage, string) {
	copies := 1 + rng.IntN(2)
	sqls := make([]string, copies)
	for i := range sqls {
		target := "fz"
		if rng.IntN(4) == 0 {
			target = "fz(k, nope)"
		}
		sqls[i] = "copy " + target + " from stdin"
	}
	var msgs []pgproto3.FrontendMessage
	var desc []string
	simple := rng.IntN(3) == 0
	if simple {
		q := strings.Join(sqls, "; ")
		switch rng.IntN(4) {
		case 0:
			// Among transaction control, which Ordo runs as pieces
			// (the session hung waiting for the COPY's piece).
			q = "begin; " + q + "; commit"
		case 1:
			q += "; commit; select 1"
		}
		msgs = append(msgs, &pgproto3.Query{String: q})
		desc = append(desc, "Query "+q)
	}
	for _, sql := range sqls {
		if !simple {
			msgs = append(msgs, &pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{})
			desc = append(desc, sql)
			if rng.IntN(2) == 0 {
				msgs = append(msgs, &pgproto3.Sync{})
				desc = append(desc, "Sync after the Execute")
			}
		}
		for i, n := 0, rng.IntN(3); i < n; i++ {
			row := fmt.Sprintf("%d\t%d\n", rng.IntN(6), rng.IntN(100))
			msgs = append(msgs, &pgproto3.CopyData{Data: []byte(row)})
			desc = append(desc, fmt.Sprintf("CopyData %q", row))
		}
		if rng.IntN(4) == 0 {
			msgs = append(msgs, &pgproto3.CopyFail{Message: "the client gave up"})
			desc = append(desc, "CopyFail")
		} else {
			msgs = append(msgs, &pgproto3.CopyDone{})
			desc = append(desc, "CopyDone")
		}
	}
	if !simple {
		msgs = append(msgs, &pgproto3.Sync{})
		desc = append(desc, "Sync")
	}
	msgs = append(msgs, &pgproto3.Query{String: markerQuery})
	return msgs, strings.Join(desc, "; ")
}

// markerQuery is an empty query: answered by EmptyQueryResponse, which
// nothing else randomCopy sends is, in every state (in a failed block
// too).
const markerQuery = ""

// exchangeMarked is exchange for messages that end with markerQuery,
// whose number of ReadyForQuery replies depends on what PostgreSQL did:
// it reads up to the marker's.
func exchangeMarked(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage) string {
	t.Helper()
	out := exchange(t, h, msgs)
	for !strings.Contains(out, "*pgproto3.EmptyQueryResponse\n") {
		out += exchange(t, h, nil)
	}
	return out
}

// executes counts the Executes in msgs.
func executes(msgs []pgproto3.FrontendMessage) int {
	n := 0
	for _, m := range msgs {
		if _, ok := m.(*pgproto3.Execute); ok {
			n++
		}
	}
	return n
}

// sendFlushed sends msgs and gives the replies 30 s to come.
func sendFlushed(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage) {
	t.Helper()
	for _, m := range msgs {
		h.Frontend.Send(m)
	}
	require.NoError(t, h.Frontend.Flush())
	_ = h.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
}

// exchange sends msgs and returns the replies up to the ReadyForQuery of
// the last one, as text. If msgs has a Flush, it sends what comes after
// it only once every Execute before it is answered (or one failed), as a
// client waiting for its results before its Sync does.
func exchange(t *testing.T, h *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage) string {
	t.Helper()
	rest := msgs[:0:0]
	for i, m := range msgs {
		if _, ok := m.(*pgproto3.Flush); ok {
			msgs, rest = msgs[:i+1], msgs[i+1:]
			break
		}
	}
	waiting := 0 // Executes unanswered before the rest is sent
	if len(rest) > 0 {
		waiting = executes(msgs)
	}
	sendFlushed(t, h, msgs)
	var b strings.Builder
	for {
		if waiting == 0 && len(rest) > 0 {
			b.WriteString("(the rest sent)\n")
			for _, m := range rest {
				h.Frontend.Send(m)
			}
			require.NoError(t, h.Frontend.Flush())
			rest = nil
		}
		msg, err := h.Frontend.Receive()
		require.NoError(t, err, "so far: %s", b.String())
		switch msg.(type) {
		case *pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse, *pgproto3.PortalSuspended:
			waiting = max(waiting-1, 0)
		case *pgproto3.ErrorResponse:
			waiting = 0 // the rest is skipped up to the Sync
		}
		b.WriteString(replyLine(msg))
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			return b.String()
		}
	}
}

// replyLine is one of PostgreSQL's replies as a line of a transcript
// ("" for what transcripts leave out: ParameterStatus, Ordo's own
// notices).
func replyLine(msg pgproto3.BackendMessage) string {
	var b strings.Builder
	switch m := msg.(type) {
	case *pgproto3.ParameterStatus:
	case *pgproto3.NoticeResponse:
		if !strings.HasPrefix(m.Message, "ordo:") {
			fmt.Fprintf(&b, "Notice %s %s %s\n", m.Severity, m.Code, m.Message)
		}
	case *pgproto3.ErrorResponse:
		fmt.Fprintf(&b, "Error %s %s %s", m.Severity, m.Code, m.Message)
		if m.Detail != "" || m.Hint != "" || m.Position != 0 {
			fmt.Fprintf(&b, " (detail %q, hint %q, position %d)", m.Detail, m.Hint, m.Position)
		}
		b.WriteString("\n")
	case *pgproto3.CommandComplete:
		fmt.Fprintf(&b, "Complete %s\n", m.CommandTag)
	case *pgproto3.DataRow:
		var vals []string
		for _, v := range m.Values {
			vals = append(vals, string(v))
		}
		fmt.Fprintf(&b, "Row %q\n", vals)
	case *pgproto3.RowDescription:
		var names []string
		for _, f := range m.Fields {
			names = append(names, string(f.Name))
		}
		fmt.Fprintf(&b, "RowDescription %q\n", names)
	case *pgproto3.ReadyForQuery:
		fmt.Fprintf(&b, "Ready %c\n", m.TxStatus)
	default:
		fmt.Fprintf(&b, "%T\n", msg)
	}
	return b.String()
}

// indent indents each line of s (the fuzzer's trace of replies).
func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}
