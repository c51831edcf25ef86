package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordo-db/ordo/internal/capture"
)

// ErrDiverged is returned by Apply and ApplyBatch when a row change does
// not find the row it changes (an update or delete matching no row, an
// insert inserting none): this node's data differs from the origin's.
var ErrDiverged = errors.New("apply: replica diverged")

// ErrGiveUp is returned by Apply and ApplyBatch when a write set could not
// be applied within Config.MaxAttempts attempts (each bounded by
// lock_timeout).
var ErrGiveUp = errors.New("apply: too many failed attempts")

// ErrPostgresRestarted is returned when PostgreSQL restarted since the
// applier first connected: applies it acknowledged without flushing them
// may be lost, so the node must restart and replay rather than go on.
var ErrPostgresRestarted = errors.New("apply: PostgreSQL restarted under the applier; restart the node so it replays from what the database proves")

// Config configures an Applier.
type Config struct {
	// DSN is an ordinary connection string of the node's PostgreSQL for a
	// superuser (session_replication_role needs one).
	DSN string
	// Workers is the number of apply connections (default 1). With more,
	// ApplyBatch applies non-conflicting write sets in parallel.
	Workers int
	// LockTimeout bounds every lock wait of an apply statement (default
	// 2s); the attempt is then rolled back and retried.
	LockTimeout time.Duration
	// BlockCheck is how long a statement may run before the applier asks
	// pg_blocking_pids who blocks it (default 2ms: the whole delivery
	// loop waits meanwhile). It asks again at doubling intervals, up to
	// 16 × BlockCheck.
	BlockCheck time.Duration
	// OnBlocked is called, from an applier goroutine, with the pids of
	// local backends (not the applier's own) that block an apply; ddl
	// tells a DDL statement is blocked (readers block DDL, not rows). The
	// session layer implements it: cancel or roll back those transactions
	// (brute-force abort). It must not block for long. May be nil.
	OnBlocked func(pids []int, ddl bool)
	// MaxAttempts bounds the attempts per write set (default 30).
	MaxAttempts int
	// BatchSize is the number of statements sent per round trip (default
	// 1000).
	BatchSize int
	// AfterDDL, if set, runs in the same transaction after the rows of a
	// write set that carries DDL (sequence normalization).
	AfterDDL string
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the applier's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Applier applies decided write sets to the local PostgreSQL. Its methods
// are not safe for concurrent use: one goroutine (the node's apply loop)
// calls Apply or ApplyBatch in seqno order.
type Applier struct {
	cfg     Config
	workers []*worker
	metrics *metrics

	pidMu sync.Mutex
	pids  map[int]*worker // backend pid -> worker
	// pgStarted is when PostgreSQL started, as the first connection saw it.
	pgStarted time.Time
	// committed is the largest seqno this applier committed an apply of
	// (its proof row with it): a reconnect checks it is still there
	// (lostCommits).
	committed atomic.Uint64

	monMu   sync.Mutex
	monitor *pgx.Conn // asks pg_blocking_pids
}

// worker is one apply connection.
type worker struct {
	conn *pgx.Conn
	pid  int
	// origin names the replication origin the worker's sessions run
	// under (useOrigin); originSet says the current session does.
	origin    string
	originSet bool
	// preempt, when set, cancels the worker's current attempt (a later
	// write set holding a lock an earlier one needs).
	mu      sync.Mutex
	preempt context.CancelFunc
	seqno   uint64
	// prepared names the statements prepared on conn, by SQL text; named
	// counts the names ever given (none is reused).
	prepared map[string]string
	named    uint64
}

// Open connects the applier's connections. Run Bootstrap first.
func Open(ctx context.Context, cfg Config) (*Applier, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 2 * time.Second
	}
	if cfg.BlockCheck <= 0 {
		cfg.BlockCheck = 2 * time.Millisecond
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 30
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Applier{cfg: cfg, pids: make(map[int]*worker), metrics: newMetrics(cfg.Registerer)}
	mon, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("apply: monitor connection: %w", err)
	}
	a.monitor = mon
	for i := 0; i < cfg.Workers; i++ {
		w := &worker{origin: fmt.Sprintf("ordo_apply_%d", i)}
		if err := a.connect(ctx, w); err != nil {
			a.Close()
			return nil, err
		}
		a.workers = append(a.workers, w)
	}
	return a, nil
}

// connect (re)opens a worker's connection in replica mode.
func (a *Applier) connect(ctx context.Context, w *worker) error {
	if w.conn != nil {
		a.pidMu.Lock()
		delete(a.pids, w.pid)
		a.pidMu.Unlock()
		w.conn.Close(context.Background())
		w.conn = nil
	}
	conn, err := pgx.Connect(ctx, a.cfg.DSN)
	if err != nil {
		return fmt.Errorf("apply: connect: %w", err)
	}
	// synchronous_commit is off: an apply lost in a crash of PostgreSQL
	// loses its proof row with it (same transaction) and is applied again
	// from the durable total-order log, so waiting for its WAL flush buys
	// nothing.
	setup := fmt.Sprintf("SET session_replication_role = replica; SET lock_timeout = %d; SET synchronous_commit = off; "+
		"SET DateStyle = 'ISO, MDY'; SET IntervalStyle = postgres; SET TimeZone = 'UTC'; SET extra_float_digits = 3; "+
		// Values arrive as pgoutput sent them, in the database's encoding:
		// pass them through unconverted (a role's client_encoding could
		// otherwise reinterpret them).
		"SELECT set_config('client_encoding', current_setting('server_encoding'), false)",
		a.cfg.LockTimeout.Milliseconds())
	if _, err := conn.Exec(ctx, setup); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("apply: set up connection: %w", err)
	}
	var started time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("apply: set up connection: %w", err)
	}
	if a.pgStarted.IsZero() {
		a.pgStarted = started
	} else if !started.Equal(a.pgStarted) {
		conn.Close(context.Background())
		return fmt.Errorf("%w (it started at %s, not %s)", ErrPostgresRestarted, started.Format(time.RFC3339), a.pgStarted.Format(time.RFC3339))
	} else if err := LostCommits(ctx, conn, a.committed.Load()); err != nil {
		conn.Close(context.Background())
		return err
	}
	w.originSet = a.useOrigin(ctx, conn, w.origin)
	w.conn, w.pid, w.prepared = conn, int(conn.PgConn().PID()), make(map[string]string)
	a.pidMu.Lock()
	a.pids[w.pid] = w
	a.pidMu.Unlock()
	return nil
}

// useOrigin runs a worker's session under its replication origin on
// PostgreSQL 16 and later, creating the origin on first use: the capture
// stream asks pgoutput for changes without an origin only, so the
// walsender no longer decodes and sends every apply for the stream to drop
// it. It never fails the connection: an apply without its origin is still
// recognised by its proof row, as on PostgreSQL 15, at the cost of the
// decoding. The origin's progress is not used (the proof rows are). It
// reports whether the session runs under the origin.
func (a *Applier) useOrigin(ctx context.Context, conn *pgx.Conn, name string) bool {
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil || version < capture.OriginFilterVersion {
		return false
	}
	// The session this one replaces may not have ended yet and still
	// hold the origin (55006): wait for it a little.
	deadline := time.Now().Add(originWait)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_replication_origin_create($1) WHERE pg_replication_origin_oid($1) IS NULL", name)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT pg_replication_origin_session_setup($1)", name)
		}
		if err == nil {
			// Every apply resets the origin's commit timestamp: a role
			// allowed the setup but not that must not get this far.
			if _, err = conn.Exec(ctx, "SELECT pg_replication_origin_xact_reset()"); err != nil {
				_, _ = conn.Exec(ctx, "SELECT pg_replication_origin_session_reset()")
			}
		}
		if err == nil {
			return true
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55006" && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		a.cfg.Logger.Warn("apply: this connection's applies run without a replication origin; the capture stream decodes them and drops them (slower, not wrong)",
			"origin", name, "err", err)
		return false
	}
}

// originWait bounds how long a new connection waits for the session it
// replaces to release the worker's replication origin.
const originWait = 3 * time.Second

// NoteCommitted tells the applier that the proof row of seqno is
// committed by someone else (the delivery loop's local commits): a
// reconnect checks the database still has it (LostCommits).
func (a *Applier) NoteCommitted(seqno uint64) {
	for {
		cur := a.committed.Load()
		if seqno <= cur || a.committed.CompareAndSwap(cur, seqno) {
			return
		}
	}
}

// Committed returns the largest seqno whose proof row is known committed
// (by an apply, or NoteCommitted).
func (a *Applier) Committed() uint64 { return a.committed.Load() }

// LostCommits checks, on a fresh connection to a PostgreSQL that was
// reached before, that the proof row of seqno (the largest one committed
// before the connection was lost; 0 for none) is still there. Applies and
// local commits run with synchronous_commit = off: a crash of any backend
// makes PostgreSQL reinitialize and drop the tail of the WAL it had not
// written yet, without a restart pg_postmaster_start_time() would show.
// Proof rows are committed in seqno order, so the largest one left tells
// whether anything acknowledged was lost. It returns ErrPostgresRestarted
// if something was: the node must replay from what the database proves.
func LostCommits(ctx context.Context, conn *pgx.Conn, seqno uint64) error {
	if seqno == 0 {
		return nil
	}
	var proven int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(seqno), 0) FROM _ordo.applied").Scan(&proven); err != nil {
		return fmt.Errorf("apply: check for lost commits: %w", err)
	}
	if uint64(proven) < seqno {
		return fmt.Errorf("%w (it lost commits it had acknowledged: the database proves seqno %d, seqno %d had committed; a backend crash reinitialized it)", ErrPostgresRestarted, proven, seqno)
	}
	return nil
}

// Close closes every connection.
func (a *Applier) Close() {
	for _, w := range a.workers {
		if w.conn != nil {
			w.conn.Close(context.Background())
		}
	}
	if a.monitor != nil {
		a.monitor.Close(context.Background())
	}
}

// monitorLocked reopens the monitor connection if it was lost.
func (a *Applier) monitorLocked(ctx context.Context) error {
	if a.monitor != nil && !a.monitor.IsClosed() {
		return nil
	}
	mon, err := pgx.Connect(ctx, a.cfg.DSN)
	if err != nil {
		return fmt.Errorf("apply: monitor connection: %w", err)
	}
	a.monitor = mon
	return nil
}

// PIDs returns the backend pids of the apply connections (the session
// layer must never brute-force abort these).
func (a *Applier) PIDs() []int {
	out := make([]int, 0, len(a.workers))
	for _, w := range a.workers {
		out = append(out, w.pid)
	}
	return out
}

// AppliedPrefix returns the largest seqno proven in _ordo.applied (0 if
// none). Write sets commit in seqno order, so every smaller seqno handed to
// this applier is proven too.
func (a *Applier) AppliedPrefix(ctx context.Context) (uint64, error) {
	a.monMu.Lock()
	defer a.monMu.Unlock()
	if err := a.monitorLocked(ctx); err != nil {
		return 0, err
	}
	var s int64
	if err := a.monitor.QueryRow(ctx, "SELECT coalesce(max(seqno), 0) FROM _ordo.applied").Scan(&s); err != nil {
		return 0, fmt.Errorf("apply: applied prefix: %w", err)
	}
	return uint64(s), nil
}

// Workers returns the number of apply connections.
func (a *Applier) Workers() int { return len(a.workers) }

// Apply applies one write set as seqno on the first worker and commits it,
// together with its proof row (seqno, gid) in _ordo.applied. A write set
// whose seqno or gid is already proven is skipped: applied reports false.
// An empty write set just records the proof (use it for seqnos decided
// abort, so the applied prefix moves past them).
func (a *Applier) Apply(ctx context.Context, seqno uint64, ws *capture.WriteSet) (applied bool, err error) {
	return a.run(ctx, a.workers[0], Item{Seqno: seqno, WriteSet: ws}, nil)
}

// Item is one write set with its seqno.
type Item struct {
	Seqno    uint64
	WriteSet *capture.WriteSet
}

// retryable reports errors after which a fresh attempt may succeed.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55P03", // lock_not_available (lock_timeout)
			"40P01",                   // deadlock_detected
			"40001",                   // serialization_failure
			"57014",                   // query_canceled (preempted)
			"23505",                   // unique_violation (a parallel order effect, redone serially)
			"57P01", "57P02", "57P03": // the backend was terminated: reconnect
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exceptions
	}
	return true // connection and context errors: reconnect and retry
}

// run applies one item on w, retrying. turn, when set, is waited for before
// COMMIT (ordered commits of ApplyBatch); serial, when set, is waited for
// before a retry (all earlier items committed).
func (a *Applier) run(ctx context.Context, w *worker, it Item, order *ordering) (bool, error) {
	stmts, err := statements(it.WriteSet)
	if err != nil {
		return false, err
	}
	var last error
	for attempt := 1; attempt <= a.cfg.MaxAttempts; attempt++ {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if attempt > 1 {
			a.metrics.retries.Inc()
			if order != nil {
				if err := order.waitPrev(ctx, it.Seqno); err != nil {
					return false, err
				}
			}
			if w.conn == nil || w.conn.IsClosed() {
				if err := a.connect(ctx, w); err != nil {
					if errors.Is(err, ErrPostgresRestarted) {
						return false, err
					}
					last = err
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
		}
		applied, err := a.attempt(ctx, w, it, stmts, order, attempt > 1)
		if err == nil {
			a.NoteCommitted(it.Seqno)
			if applied {
				a.metrics.applied.Inc()
				a.metrics.rows.Add(float64(len(it.WriteSet.Rows)))
			} else {
				a.metrics.skipped.Inc()
			}
			return applied, nil
		}
		last = err
		if w.conn != nil && !w.conn.IsClosed() {
			// The next attempt prepares its statements afresh, in case
			// one of them was what failed (prepared against a schema that
			// changed without a DDL entry telling us).
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, rerr := w.conn.Exec(rctx, "ROLLBACK"); rerr != nil || w.forget(rctx) != nil {
				w.conn.Close(context.Background())
			}
			cancel()
		}
		lost := w.conn == nil || w.conn.IsClosed()
		if errors.Is(err, ErrDiverged) || !(retryable(err) || lost) {
			return false, err
		}
		a.cfg.Logger.Info("apply: attempt failed; retrying", "seqno", it.Seqno, "gid", it.WriteSet.GID, "attempt", attempt, "err", err)
	}
	return false, fmt.Errorf("%w: seqno %d gid %s: %w", ErrGiveUp, it.Seqno, it.WriteSet.GID, last)
}

// attempt runs one transaction: check the proof, apply the statements,
// insert the proof, wait for its turn, commit.
func (a *Applier) attempt(ctx context.Context, w *worker, it Item, stmts []stmt, order *ordering, serial bool) (bool, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if order != nil && !serial {
		w.mu.Lock()
		w.preempt, w.seqno = cancel, it.Seqno
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.preempt = nil
			w.mu.Unlock()
		}()
	}
	conn := w.conn
	// Statements are prepared (once per connection) unless the write set
	// changes the schema they would be prepared against.
	prep := len(it.WriteSet.DDL) == 0
	// BEGIN and the proof row travel with the first statements, in one
	// round trip: a write set already proven fails on the proof's unique
	// keys (seqno, gid) before any of its rows is applied.
	head := []stmt{{sql: "BEGIN", want: -1}, {
		sql:    "INSERT INTO _ordo.applied (seqno, gid, label) VALUES ($1, $2, $3)",
		params: [][]byte{[]byte(strconv.FormatUint(it.Seqno, 10)), []byte(it.WriteSet.GID), label(it.WriteSet.Label)},
		want:   1,
	}}
	if w.originSet {
		// A session under a replication origin keeps the commit timestamp
		// of its first commit for every later one (PostgreSQL takes it
		// for the origin's remote commit time): reset it, so each apply
		// has its own, as track_commit_timestamp's users expect.
		head = slices.Insert(head, 1, stmt{sql: "SELECT pg_replication_origin_xact_reset()", want: -1})
	}
	alreadyProven := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == "applied"
	}
	skip := func() (bool, error) {
		if _, err := conn.Exec(actx, "ROLLBACK"); err != nil {
			return false, fmt.Errorf("apply: rollback: %w", err)
		}
		if order != nil {
			order.done(it.Seqno)
		}
		return false, nil
	}
	if len(it.WriteSet.DDL) > 0 || len(stmts) == 0 {
		if err := a.execChunk(actx, w, it.Seqno, head, order, prep); err != nil {
			if alreadyProven(err) {
				return skip()
			}
			return false, err
		}
		head = nil
	}
	if len(it.WriteSet.DDL) > 0 && it.WriteSet.SearchPath != "" {
		if _, err := conn.Exec(actx, "SELECT set_config('search_path', $1, true)", it.WriteSet.SearchPath); err != nil {
			return false, fmt.Errorf("apply: search_path for DDL: %w", err)
		}
	}
	// A small write set applied on its own (no ordering with other
	// workers, no DDL, no AfterDDL) of inserts only is one round trip:
	// BEGIN, proof, rows and COMMIT; an error (a duplicate key) ends the
	// pipeline before COMMIT. An update or delete that finds no row is no
	// error to PostgreSQL: its count is checked before COMMIT is sent, so
	// a divergence commits nothing and the cluster can vote to skip it.
	oneTrip := order == nil && len(it.WriteSet.DDL) == 0 && head != nil && len(stmts) <= a.cfg.BatchSize && !findsRows(stmts)
	if oneTrip {
		chunk := append(append(head, stmts...), stmt{sql: "COMMIT", want: -1})
		if err := a.execChunk(actx, w, it.Seqno, chunk, order, prep); err != nil {
			if alreadyProven(err) {
				return skip()
			}
			return false, err
		}
		return true, nil
	}
	// rows applies statements, the proof (head) with the first of them.
	// proven: the write set was applied before.
	rows := func(stmts []stmt) (proven bool, err error) {
		for _, seg := range segments(stmts) {
			if seg.copy {
				if head != nil {
					if err := a.execChunk(actx, w, it.Seqno, head, order, prep); err != nil {
						return alreadyProven(err), err
					}
					head = nil
				}
				if _, err := a.copyRows(actx, w, it.Seqno, seg.stmts, order, prep); err != nil {
					return false, err
				}
				continue
			}
			for i := 0; i < len(seg.stmts); i += a.cfg.BatchSize {
				chunk := seg.stmts[i:min(i+a.cfg.BatchSize, len(seg.stmts))]
				if head != nil {
					chunk = append(head, chunk...)
					head = nil
					if err := a.execChunk(actx, w, it.Seqno, chunk, order, prep); err != nil {
						return alreadyProven(err), err
					}
					continue
				}
				if err := a.execChunk(actx, w, it.Seqno, chunk, order, prep); err != nil {
					return false, err
				}
			}
		}
		return false, nil
	}
	// The DDL is replayed among the rows where it ran on its origin
	// (DDLRowsBefore): rows changed before a statement were changed under
	// the schema before it (a column it drops or renames), the rest under
	// the schema after it. Statements that ran at the same point are
	// replayed together.
	ddl, at := it.WriteSet.DDL, it.WriteSet.DDLRowsBefore
	if len(at) != len(ddl) {
		at = make([]int, len(ddl)) // every statement before the rows
	}
	for i := 0; i < len(ddl); {
		j := i + 1
		for j < len(ddl) && at[j] == at[i] {
			j++
		}
		k := 0
		for k < len(stmts) && stmts[k].at < at[i] {
			k++
		}
		if proven, err := rows(stmts[:k]); err != nil {
			if proven {
				return skip()
			}
			return false, err
		}
		stmts = stmts[k:]
		// DDL waits for locks like rows do (an ALTER TABLE needs every
		// local reader of its table gone): watch for blockers too.
		stop := a.watch(actx, w, it.Seqno, order, true)
		if err := replayDDL(actx, conn, it.WriteSet, i, j); err != nil {
			stop()
			return false, err
		}
		// A table the DDL left without a primary key is REPLICA IDENTITY
		// FULL before its rows are applied: PostgreSQL refuses to update
		// or delete rows of a published table without a replica identity
		// (the origin's event trigger did the same, but event triggers do
		// not fire for applies).
		if _, err := conn.Exec(actx, capture.ReplicaIdentitySQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			stop()
			return false, fmt.Errorf("apply: replica identities after DDL: %w", err)
		}
		stop()
		i = j
	}
	if proven, err := rows(stmts); err != nil {
		if proven {
			return skip()
		}
		return false, err
	}
	if len(it.WriteSet.DDL) > 0 && a.cfg.AfterDDL != "" {
		if _, err := conn.Exec(actx, a.cfg.AfterDDL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return false, fmt.Errorf("apply: after DDL: %w", err)
		}
	}
	if order != nil {
		if err := order.waitPrev(actx, it.Seqno); err != nil {
			return false, err
		}
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return false, fmt.Errorf("apply: commit: %w", err)
	}
	if order != nil {
		order.done(it.Seqno)
	}
	return true, nil
}

// findsRows reports whether a statement must find an existing row (an
// update or a delete), which PostgreSQL does not treat as an error when
// it finds none.
func findsRows(stmts []stmt) bool {
	for i := range stmts {
		if r := stmts[i].row; r != nil && stmts[i].want >= 0 && (r.Op == capture.OpUpdate || r.Op == capture.OpDelete) {
			return true
		}
	}
	return false
}

// execChunk sends statements in one round trip and checks each affected
// the rows it must, while a watcher reports blockers.
func (a *Applier) execChunk(ctx context.Context, w *worker, seqno uint64, chunk []stmt, order *ordering, prepare bool) error {
	// Preparing takes the tables' locks too: the watcher covers it.
	stop := a.watch(ctx, w, seqno, order, false)
	if prepare {
		if err := w.prepareAll(ctx, chunk); err != nil {
			stop()
			return err
		}
	}
	b := &pgconn.Batch{}
	for i := range chunk {
		s := &chunk[i]
		if name, ok := w.prepared[s.sql]; prepare && ok {
			b.ExecPrepared(name, s.params, nil, nil)
		} else {
			queue(b, s)
		}
	}
	results, err := w.conn.PgConn().ExecBatch(ctx, b).ReadAll()
	stop()
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	for i, r := range results {
		if r.Err != nil {
			return fmt.Errorf("apply: %s: %w", chunk[i].sql, r.Err)
		}
		if want := chunk[i].want; want >= 0 && r.CommandTag.RowsAffected() != want {
			row := chunk[i].row
			return fmt.Errorf("%w: %s of %s affected %d rows, want %d", ErrDiverged, row.Op, row.Key, r.CommandTag.RowsAffected(), want)
		}
	}
	return nil
}

// maxPrepared bounds the statements a worker keeps prepared (a variable
// for tests).
var maxPrepared = 500

// prepareAll prepares on the worker's connection every statement of chunk
// with parameters not prepared yet (one round trip each, once per statement
// text: applies repeat a few shapes per table, and PostgreSQL then parses
// and plans each once instead of for every row). A worker holding more
// than maxPrepared forgets them all first, before any name is handed out
// for the chunk. Parameter types are inferred when a statement is prepared
// and stay fixed, so every DDL forgets them too (Forget).
func (w *worker) prepareAll(ctx context.Context, chunk []stmt) error {
	missing := func() []string {
		var todo []string
		for i := range chunk {
			if sql := chunk[i].sql; len(chunk[i].params) > 0 && w.prepared[sql] == "" && !slices.Contains(todo, sql) {
				todo = append(todo, sql)
			}
		}
		return todo
	}
	todo := missing()
	if len(todo) == 0 {
		return nil
	}
	if len(w.prepared)+len(todo) > maxPrepared {
		if err := w.forget(ctx); err != nil {
			return err
		}
		todo = missing()
		if len(todo) > maxPrepared {
			return nil // a chunk of more shapes than that runs unprepared
		}
	}
	for _, sql := range todo {
		w.named++
		name := "ordo_apply_" + strconv.FormatUint(w.named, 10)
		if _, err := w.conn.PgConn().Prepare(ctx, name, sql, nil); err != nil {
			return fmt.Errorf("apply: prepare %s: %w", sql, err)
		}
		w.prepared[sql] = name
	}
	return nil
}

// forget deallocates the worker's prepared statements.
func (w *worker) forget(ctx context.Context) error {
	if len(w.prepared) == 0 {
		return nil
	}
	// Only ours: DEALLOCATE ALL would also drop pgx's own statement cache.
	var b strings.Builder
	for _, name := range w.prepared {
		b.WriteString("DEALLOCATE " + name + ";")
	}
	if _, err := w.conn.PgConn().Exec(ctx, b.String()).ReadAll(); err != nil {
		return fmt.Errorf("apply: deallocate: %w", err)
	}
	clear(w.prepared)
	return nil
}

// Forget drops every statement the workers have prepared. The delivery
// loop calls it after each committed DDL, local or remote: a statement's
// parameter types were fixed when it was prepared, against the old schema.
// A connection that cannot forget is replaced by a new one.
func (a *Applier) Forget(ctx context.Context) {
	for _, w := range a.workers {
		if w.conn == nil || w.conn.IsClosed() {
			continue
		}
		if err := w.forget(ctx); err != nil {
			a.cfg.Logger.Warn("apply: reconnecting: the connection's prepared statements could not be dropped", "err", err)
			if err := a.connect(ctx, w); err != nil {
				// The next apply finds the connection closed and retries.
				a.cfg.Logger.Warn("apply: reconnect", "err", err)
			}
		}
	}
}

// replayDDL runs ws's DDL statements from to to (exclusive) in order, each
// under the settings it ran under on the origin (search_path, TimeZone,
// DateStyle…), set for the transaction and put back to the applier's own
// afterwards, so the rows that follow are applied as always. Each setting
// is set in a statement of its own: one that changes how text is lexed
// (standard_conforming_strings) must be in force before the statement is
// parsed.
func replayDDL(ctx context.Context, conn *pgx.Conn, ws *capture.WriteSet, from, to int) error {
	changed := false
	for i := from; i < to; i++ {
		ddl := ws.DDL[i]
		if i < len(ws.DDLSettings) {
			for _, st := range ws.DDLSettings[i] {
				var err error
				switch st.Name {
				case capture.SettingSessionAuthorization:
					_, err = conn.Exec(ctx, "SET LOCAL SESSION AUTHORIZATION "+pgx.Identifier{st.Value}.Sanitize())
				case capture.SettingRole:
					_, err = conn.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{st.Value}.Sanitize())
				default:
					_, err = conn.Exec(ctx, "SELECT set_config($1, $2, true)", st.Name, st.Value)
				}
				if err != nil {
					return fmt.Errorf("apply: run the replay of %q as on its origin (%s %s; roles must exist on every node): %w", ddl, st.Name, st.Value, err)
				}
				changed = true
			}
		}
		if _, err := conn.Exec(ctx, ddl, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("apply: replay DDL %q: %w", ddl, err)
		}
		if changed {
			// The next statement, or the rows, run as the applier again.
			if _, err := conn.Exec(ctx, "SET LOCAL SESSION AUTHORIZATION DEFAULT"); err != nil {
				return fmt.Errorf("apply: back to the applier's role after DDL: %w", err)
			}
		}
	}
	if changed {
		if _, err := conn.Exec(ctx, applierSettingsLocal); err != nil {
			return fmt.Errorf("apply: reset settings after DDL: %w", err)
		}
		if ws.SearchPath != "" {
			if _, err := conn.Exec(ctx, "SELECT set_config('search_path', $1, true)", ws.SearchPath); err != nil {
				return fmt.Errorf("apply: search_path after DDL: %w", err)
			}
		}
	}
	return nil
}

// applierSettingsLocal puts back, for the rest of the transaction, the
// settings an apply connection runs with (connect) that a DDL replay may
// have changed.
const applierSettingsLocal = "SELECT set_config('DateStyle', 'ISO, MDY', true), set_config('IntervalStyle', 'postgres', true), " +
	"set_config('TimeZone', 'UTC', true), set_config('standard_conforming_strings', 'on', true)"

// label is a proof row's label parameter: NULL for none.
func label(l string) []byte {
	if l == "" {
		return nil
	}
	return []byte(l)
}
