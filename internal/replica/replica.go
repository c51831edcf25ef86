package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/certifier"
	"github.com/ordo-db/ordo/internal/schemacheck"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Protocol names.
const (
	DBSM   = "dbsm"
	DBSMSI = "dbsm-si"
)

// ErrUnknownOutcome is returned by Terminate when the proposal could not be
// confirmed (no quorum, timeout, shutdown): the transaction may still
// commit or abort; the node resolves it when the order delivers an outcome.
var ErrUnknownOutcome = errors.New("replica: commit outcome unknown")

// ErrTooLarge is returned by Terminate when the transaction's entry
// exceeds what the total order accepts; it was not proposed.
var ErrTooLarge = errors.New("replica: transaction too large to replicate")

// ErrNotReplicated is returned by Terminate when a fragment of a
// transaction too large for one entry could not be proposed: the
// transaction cannot commit, and its abort is being ordered.
var ErrNotReplicated = errors.New("replica: the transaction could not be replicated")

// ErrPostgresRestarted is returned when the local PostgreSQL restarted
// under a running node: the applies and commits it acknowledged without
// flushing them may be lost, so the node must restart and replay from what
// the database proves rather than carry on.
var ErrPostgresRestarted = errors.New("replica: PostgreSQL restarted under this node; restart the node so it replays from what the database proves")

// ErrInconsistent is returned by Terminate once this node has found that
// its database differs from the others' (an apply that did not match): it
// stops accepting update transactions rather than diverge silently.
var ErrInconsistent = errors.New("replica: node is inconsistent and refuses updates")

// Orderer is the part of the total order the replica uses
// (*totalorder.Node).
type Orderer interface {
	Propose(ctx context.Context, payload []byte) (uint64, error)
	Deliveries() <-chan totalorder.Delivery
	MarkApplied(seqno uint64)
	ReadIndex(ctx context.Context) (uint64, error)
}

// Config configures a Replica.
type Config struct {
	NodeID   uint32
	Protocol string // DBSM or DBSMSI
	// Window is the certification window (seqnos); cluster-wide.
	Window uint64
	// CommitTimeout bounds each proposal of a transaction and the wait
	// for its outcome (default 30s).
	CommitTimeout time.Duration
	// MaxEntryBytes is the size above which a transaction's rows are
	// split over fragments (0: never split).
	MaxEntryBytes int
	// DSN of the local PostgreSQL, superuser.
	DSN     string
	Order   Orderer
	Applier *apply.Applier
	// StartAfter is the seqno the total order was started after; the
	// applied prefix starts there.
	StartAfter uint64
	// Proven is the last seqno the database proved applied when the node
	// started: entries up to it are replayed, not carried out anew (no
	// schema fingerprints are taken for them).
	Proven uint64
	// OnDDL is called on the delivery loop after a transaction with DDL
	// committed, local or remote (to refresh the catalog and normalize
	// sequences).
	OnDDL      func(ctx context.Context)
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Txn is a prepared transaction to terminate.
type Txn struct {
	GID           txn.GID
	Origin        uint32
	SnapshotSeqno uint64
	Keys          []txn.KeyMode
	ReadAll       bool
	WriteSet      *capture.WriteSet
	DDL           []string
	SearchPath    string
}

// Outcome is the fate of a terminated transaction.
type Outcome struct {
	Commit bool
	Seqno  uint64
	Reason string // why it aborted
}

// waiter is a local transaction being terminated.
type waiter struct {
	ch      chan Outcome
	writes  map[txn.Key]bool // its write keys
	decided bool             // its outcome was delivered (guarded by Replica.mu)
}

// Replica is the replication engine of one node.
type Replica struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	prefix atomic.Uint64
	failed atomic.Pointer[error]

	mu       sync.Mutex
	waiters  map[txn.GID]*waiter
	prefixCh chan struct{} // closed and replaced whenever prefix moves

	// Owned by the delivery loop.
	cert    *certifier.Certifier
	conn    *pgx.Conn
	aborted map[txn.GID]uint64 // AbortEntry delivered before the TxnEntry: its seqno
	frags   map[txn.GID]*fragments
	fragMem int // bytes held in frags
	// pgStarted is when the local PostgreSQL started (connectLoop).
	pgStarted time.Time
	// proven holds the seqnos up to cfg.Proven that committed here
	// (proofs.go); proofs the local commits whose proof row is not
	// written yet; trimmed the seqno of the last trim of old proofs.
	proven  map[uint64]bool
	proofs  []proof
	trimmed uint64
	// rolledBack holds local prepared transactions rolled back early
	// because they blocked an apply (brute force); if the order later
	// commits one, the loop applies its write set instead.
	rolledMu   sync.Mutex
	rolledBack map[txn.GID]bool

	schema schemaState

	// bfConn is RollbackUndecided's connection (called often under
	// contention: one connection, not one per call).
	bfMu   sync.Mutex
	bfConn *pgx.Conn

	bg sync.WaitGroup
}

// New returns a Replica; Run starts its delivery loop.
func New(cfg Config) (*Replica, error) {
	if cfg.Protocol != DBSM && cfg.Protocol != DBSMSI {
		return nil, fmt.Errorf("replica: unknown protocol %q (want %s or %s)", cfg.Protocol, DBSM, DBSMSI)
	}
	if cfg.Window == 0 {
		cfg.Window = 100000
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replica{
		cfg:        cfg,
		log:        cfg.Logger,
		m:          newMetrics(cfg.Registerer),
		waiters:    make(map[txn.GID]*waiter),
		prefixCh:   make(chan struct{}),
		cert:       certifier.New(certifier.Config{CheckReads: cfg.Protocol == DBSM, Window: cfg.Window}, cfg.StartAfter),
		aborted:    make(map[txn.GID]uint64),
		frags:      make(map[txn.GID]*fragments),
		rolledBack: make(map[txn.GID]bool),
	}
	r.m.initOutcomes(cfg.Protocol)
	r.schema.own = make(map[uint64]schemacheck.Snapshot)
	r.prefix.Store(cfg.StartAfter)
	return r, nil
}

// Name returns the protocol name (DBSM or DBSMSI).
func (r *Replica) Name() string { return r.cfg.Protocol }

// CertifiesReads reports whether read keys are certified (dbsm).
func (r *Replica) CertifiesReads() bool { return r.cfg.Protocol == DBSM }

// AppliedPrefix returns the largest seqno s such that every entry up to s
// has been carried out on the local PostgreSQL.
func (r *Replica) AppliedPrefix() uint64 { return r.prefix.Load() }

// WaitApplied waits until the applied prefix reaches seqno.
func (r *Replica) WaitApplied(ctx context.Context, seqno uint64) error {
	for {
		r.mu.Lock()
		ch := r.prefixCh
		r.mu.Unlock()
		if r.prefix.Load() >= seqno {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SyncRead waits until the local database reflects every transaction
// committed in the cluster before the call (Raft read index).
func (r *Replica) SyncRead(ctx context.Context) error {
	idx, err := r.cfg.Order.ReadIndex(ctx)
	if err != nil {
		return err
	}
	return r.WaitApplied(ctx, idx)
}

// Err returns why the node refuses updates, or nil.
func (r *Replica) Err() error {
	if p := r.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *Replica) fail(err error) {
	err = fmt.Errorf("%w: %w", ErrInconsistent, err)
	if r.failed.CompareAndSwap(nil, &err) {
		r.log.Error("node stops accepting updates", "err", err)
	}
}

// Terminate proposes t and waits for its outcome. The transaction must be
// prepared under t.GID on the local PostgreSQL; the delivery loop commits
// or rolls it back.
func (r *Replica) Terminate(ctx context.Context, t *Txn) (Outcome, error) {
	if err := r.Err(); err != nil {
		return Outcome{}, err
	}
	began := time.Now()
	if t.WriteSet != nil {
		r.m.writeRows.Observe(float64(len(t.WriteSet.Rows)))
	}
	if r.cfg.Protocol == DBSM {
		reads := 0
		for _, k := range t.Keys {
			if k.Mode&txn.S != 0 {
				reads++
			}
		}
		r.m.readKeys.Observe(float64(reads))
	}
	writes := make(map[txn.Key]bool)
	for _, k := range t.Keys {
		if k.Mode&txn.X != 0 {
			writes[k.Key] = true
		}
	}
	r.mu.Lock()
	w := r.waiters[t.GID] // registered by Prepared, or not
	if w == nil {
		w = &waiter{ch: make(chan Outcome, 1)}
		r.waiters[t.GID] = w
	}
	w.writes = writes
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, t.GID)
		r.mu.Unlock()
	}()
	// Fragments first, if the transaction is too large for one entry.
	// Without its TxnEntry it cannot commit: should a fragment fail, its
	// abort is ordered so every node forgets the fragments it holds.
	proposed := 0
	var fragErr error
	payload, err := encodeTxn(t, r.cfg.Protocol, r.cfg.MaxEntryBytes, func(payload []byte) error {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.CommitTimeout)
		defer cancel()
		if _, err := r.cfg.Order.Propose(pctx, payload); err != nil {
			fragErr = fmt.Errorf("fragment %d: %w", proposed+1, err)
			return fragErr
		}
		proposed++
		r.m.fragments.Inc()
		return nil
	})
	if err != nil {
		if proposed > 0 || fragErr != nil {
			r.abortInBackground(t.GID)
		} else {
			r.forgetRolledBack(t.GID) // never proposed: nothing will finish it
		}
		switch {
		case fragErr == nil:
			// Nothing decides a transaction that was never proposed whole:
			// the session rolls it back.
			return Outcome{}, fmt.Errorf("%w: encode %s: %w", ErrNotReplicated, t.GID, err)
		case errors.Is(err, totalorder.ErrTooLarge):
			return Outcome{}, fmt.Errorf("%w: %w", ErrTooLarge, err)
		default:
			return Outcome{}, fmt.Errorf("%w: %w", ErrNotReplicated, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CommitTimeout)
	defer cancel()
	if _, err := r.cfg.Order.Propose(ctx, payload); err != nil {
		if errors.Is(err, totalorder.ErrTooLarge) {
			if proposed > 0 {
				r.abortInBackground(t.GID)
			} else {
				r.forgetRolledBack(t.GID)
			}
			return Outcome{}, fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		r.abortInBackground(t.GID)
		return Outcome{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	select {
	case o := <-w.ch:
		r.m.commitLatency.Observe(time.Since(began).Seconds())
		return o, nil
	case <-ctx.Done():
		r.abortInBackground(t.GID)
		return Outcome{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, ctx.Err())
	}
}

// Prepared registers gid, just prepared, as undecided before its write set
// is decoded (which can take a while for a large transaction), so that an
// apply it blocks meanwhile can roll it back (RollbackUndecided); should
// the order then commit it, the delivery loop applies its rows instead.
// The returned func forgets gid unless Terminate was called for it.
func (r *Replica) Prepared(gid txn.GID) (forget func()) {
	w := &waiter{ch: make(chan Outcome, 1)}
	r.mu.Lock()
	r.waiters[gid] = w
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		unused := r.waiters[gid] == w && w.writes == nil
		if unused {
			delete(r.waiters, gid)
		}
		r.mu.Unlock()
		if unused { // never proposed: nothing will finish it
			r.forgetRolledBack(gid)
		}
	}
}

func (r *Replica) forgetRolledBack(gid txn.GID) {
	r.rolledMu.Lock()
	delete(r.rolledBack, gid)
	r.rolledMu.Unlock()
}

// abortInBackground proposes an AbortEntry for gid until one is committed.
// Whichever of the transaction and the abort is delivered first decides.
func (r *Replica) abortInBackground(gid txn.GID) {
	payload, err := encodeAbort(gid)
	if err != nil {
		r.log.Error("encode abort", "gid", gid, "err", err)
		return
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		for attempt := 0; attempt < 1000; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := r.cfg.Order.Propose(ctx, payload)
			cancel()
			if err == nil || errors.Is(err, totalorder.ErrStopped) || errors.Is(err, totalorder.ErrRemoved) {
				return
			}
			time.Sleep(time.Second)
		}
		r.log.Error("could not propose the abort of a prepared transaction; it stays prepared", "gid", gid)
	}()
}

// CountBruteForce counts a local transaction aborted by brute force
// before it reached the order (it blocked an apply while it ran).
func (r *Replica) CountBruteForce() {
	r.m.outcomes.WithLabelValues(r.cfg.Protocol, "local", "abort", "brute_force").Inc()
}

// RollbackUndecided rolls back every prepared transaction of this node
// whose outcome has not been delivered yet. The applier calls it (through
// the node's OnBlocked) when a prepared transaction blocks an apply: the
// apply was delivered first, so every undecided local transaction is
// ordered after it. Should the order later commit one of them, the
// delivery loop applies its write set instead of COMMIT PREPARED, so
// rolling back a non-conflicting one is harmless.
func (r *Replica) RollbackUndecided(ctx context.Context) {
	r.mu.Lock()
	gids := make([]txn.GID, 0, len(r.waiters))
	for gid, w := range r.waiters {
		if !w.decided {
			gids = append(gids, gid)
		}
	}
	r.mu.Unlock()
	r.rolledMu.Lock()
	gids = slices.DeleteFunc(gids, func(g txn.GID) bool { return r.rolledBack[g] })
	r.rolledMu.Unlock()
	if len(gids) == 0 {
		r.log.Debug("a prepared transaction blocks an apply, and this node has no undecided one to roll back")
		return
	}
	r.bfMu.Lock()
	defer r.bfMu.Unlock()
	if r.bfConn == nil || r.bfConn.IsClosed() {
		conn, err := pgx.Connect(ctx, r.cfg.DSN)
		if err != nil {
			r.log.Warn("brute-force rollback: connect", "err", err)
			return
		}
		r.bfConn = conn
	}
	for _, gid := range gids {
		// The delivery loop is blocked in the apply that called us, so it
		// cannot finish gid meanwhile; only a successful rollback is noted
		// (otherwise the loop must still COMMIT or ROLLBACK PREPARED it).
		if _, err := r.bfConn.Exec(ctx, "ROLLBACK PREPARED '"+string(gid)+"'"); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42704" {
				// Already gone: its session gave up on it, or it was
				// never prepared under this name.
				r.log.Debug("brute-force rollback: no such prepared transaction", "gid", gid)
			} else {
				r.log.Warn("brute-force rollback of a prepared transaction", "gid", gid, "err", err)
			}
			continue
		}
		r.rolledMu.Lock()
		r.rolledBack[gid] = true
		r.rolledMu.Unlock()
		r.m.bruteForce.Inc()
	}
}

// ResolveLeftovers aborts this node's prepared transactions left over from
// before a restart whose outcome the order never delivered: it waits until
// the node has caught up with the cluster, then proposes an AbortEntry for
// each prepared transaction of this node with a gid counter below before
// (gids of sessions of this incarnation are larger). Whichever of the
// transaction and its abort is delivered first decides, on every node.
func (r *Replica) ResolveLeftovers(ctx context.Context, before uint64) error {
	if err := r.SyncRead(ctx); err != nil {
		return fmt.Errorf("replica: catch up before resolving prepared transactions: %w", err)
	}
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return fmt.Errorf("replica: list prepared transactions: %w", err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("replica: list prepared transactions: %w", err)
	}
	for _, g := range gids {
		node, counter, err := txn.ParseGID(g)
		if err != nil || node != r.cfg.NodeID || counter >= before {
			continue
		}
		r.log.Warn("aborting a prepared transaction left over from before a restart", "gid", g)
		r.abortInBackground(txn.GID(g))
	}
	return nil
}

// connectLoop opens the delivery loop's connection. COMMIT PREPARED on it
// need not wait for its WAL flush: if PostgreSQL crashes and loses it, the
// transaction is still prepared (PREPARE was flushed) and replay after the
// restart commits it again.
func (r *Replica) connectLoop(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("replica: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("replica: %w", err)
	}
	var started time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("replica: %w", err)
	}
	if r.pgStarted.IsZero() {
		r.pgStarted = started
	} else if !started.Equal(r.pgStarted) {
		conn.Close(context.Background())
		return nil, fmt.Errorf("%w (it started at %s, not %s)", ErrPostgresRestarted, started.Format(time.RFC3339), r.pgStarted.Format(time.RFC3339))
	}
	return conn, nil
}

// maxBatch bounds the deliveries the loop takes at once.
const maxBatch = 64

// Run is the delivery loop. It returns when ctx ends or the order's
// delivery channel closes, after the background proposals finish.
//
// It takes every delivery already waiting (up to maxBatch) at once and
// carries them out in order, except that consecutive remote transactions
// without DDL are applied together (apply.ApplyBatch: in parallel where
// their rows do not overlap, committed in seqno order). The applied prefix
// moves past an entry only once it and every entry before it are carried
// out.
func (r *Replica) Run(ctx context.Context) error {
	defer r.bg.Wait()
	conn, err := r.connectLoop(ctx)
	if err != nil {
		return err
	}
	r.conn = conn
	if err := r.loadProven(ctx); err != nil {
		conn.Close(context.Background())
		return err
	}
	defer func() {
		r.conn.Close(context.Background())
		r.bfMu.Lock()
		if r.bfConn != nil {
			r.bfConn.Close(context.Background())
			r.bfConn = nil
		}
		r.bfMu.Unlock()
	}()
	for {
		var batch []totalorder.Delivery
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-r.cfg.Order.Deliveries():
			if !ok {
				return nil
			}
			batch = append(batch, d)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case d, ok := <-r.cfg.Order.Deliveries():
				if !ok {
					break drain
				}
				batch = append(batch, d)
			default:
				break drain
			}
		}
		r.m.queue.Set(float64(len(batch) + len(r.cfg.Order.Deliveries())))
		if err := r.deliverBatch(ctx, batch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.fail(err)
			return err
		}
	}
}

// deliverBatch carries out deliveries in order, applying runs of remote
// transactions together.
func (r *Replica) deliverBatch(ctx context.Context, batch []totalorder.Delivery) error {
	var run []apply.Item // remote commits not yet applied
	var runLast uint64
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		if err := r.flushProofs(ctx); err != nil {
			return err
		}
		began := time.Now()
		if len(run) == 1 || r.cfg.Applier.Workers() == 1 {
			for _, it := range run {
				if _, err := r.cfg.Applier.Apply(ctx, it.Seqno, it.WriteSet); err != nil {
					return fmt.Errorf("replica: apply %s at seqno %d: %w", it.WriteSet.GID, it.Seqno, err)
				}
			}
		} else if err := r.cfg.Applier.ApplyBatch(ctx, run); err != nil {
			return fmt.Errorf("replica: apply seqnos %d-%d: %w", run[0].Seqno, runLast, err)
		}
		per := time.Since(began).Seconds() / float64(len(run))
		for range run {
			r.m.applyLatency.Observe(per)
		}
		run = run[:0]
		r.publish(runLast)
		return nil
	}
	for _, d := range batch {
		if d.Type == totalorder.DeliverySnapshot {
			return fmt.Errorf("replica: the total order sent a snapshot at seqno %d: this node is too far behind to catch up from the log (state transfer is not supported yet)", d.Seqno)
		}
		var e ordov1.Entry
		if err := proto.Unmarshal(d.Data, &e); err != nil {
			return fmt.Errorf("replica: entry %d: %w", d.Seqno, err)
		}
		if fromNewerVersion(&e) {
			// Carrying it out without what this version does not know
			// (a new kind of entry, a new field) could diverge: stop.
			return fmt.Errorf("replica: entry %d holds fields this version of Ordo does not know: a newer node wrote it; upgrade this node", d.Seqno)
		}
		if len(r.frags) > 0 {
			r.expireFragments(d.Seqno)
		}
		if len(r.aborted) > 0 && d.Seqno%1024 == 0 {
			r.expireAborts(d.Seqno)
		}
		it, kind, err := r.batchable(ctx, d.Seqno, &e, d.Data)
		if err != nil {
			return err
		}
		switch kind {
		case remoteApply:
			run = append(run, it)
			runLast = d.Seqno
			continue
		case nothing:
			if len(run) > 0 {
				runLast = d.Seqno // published with the run
			} else {
				r.publish(d.Seqno)
			}
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if err := r.deliver(ctx, d.Seqno, &e); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := r.flushProofs(ctx); err != nil {
		return err
	}
	return r.trimProofs(ctx, batch[len(batch)-1].Seqno)
}

// What batchable found.
const (
	other       = iota // anything else: carry it out with deliver
	remoteApply        // a remote transaction that commits: apply the item
	nothing            // a remote transaction that aborts, or a fragment: nothing to carry out
)

// batchable certifies d if it is a transaction from another node without
// DDL or fragments and says whether it is to be applied, and holds d if it
// is a fragment; anything else is left to deliver, uncertified. data is
// d's payload.
func (r *Replica) batchable(ctx context.Context, seqno uint64, e *ordov1.Entry, data []byte) (apply.Item, int, error) {
	if f := e.GetFragment(); f != nil {
		r.cert.Skip(seqno)
		r.holdFragment(seqno, f, data)
		return apply.Item{}, nothing, nil
	}
	k, ok := e.Kind.(*ordov1.Entry_Txn)
	if !ok || k.Txn.Origin == r.cfg.NodeID || len(k.Txn.Ddl) > 0 || k.Txn.Fragments > 0 {
		return apply.Item{}, other, nil
	}
	out, err := r.certify(seqno, k.Txn)
	if err != nil {
		return apply.Item{}, other, err
	}
	if !out.Commit || seqno <= r.cfg.Proven { // a replayed commit is applied already
		return apply.Item{}, nothing, nil
	}
	ws, err := decodeWriteSet(k.Txn)
	if err != nil {
		return apply.Item{}, other, err
	}
	r.rollbackConflicting(ctx, decodeKeys(k.Txn))
	return apply.Item{Seqno: seqno, WriteSet: ws}, remoteApply, nil
}

// deliver carries out the decoded entry at seqno.
func (r *Replica) deliver(ctx context.Context, seqno uint64, e *ordov1.Entry) error {
	switch k := e.Kind.(type) {
	case *ordov1.Entry_Abort:
		gid := txn.GID(k.Abort.Gid)
		r.aborted[gid] = seqno
		r.dropFragments(gid)
		r.cert.Skip(seqno)
		// The origin's transaction is rolled back when its TxnEntry is
		// delivered, or now if it never will be: the origin proposed the
		// abort because it gave up, so nothing else will decide it.
		if gid.Node() == r.cfg.NodeID {
			if err := r.finishLocal(ctx, seqno, gid, false, nil, nil); err != nil {
				return err
			}
		}
	case *ordov1.Entry_Txn:
		if err := r.deliverTxn(ctx, seqno, k.Txn); err != nil {
			return err
		}
	case *ordov1.Entry_SchemaCheck:
		r.cert.Skip(seqno)
		if seqno > r.cfg.Proven {
			r.fingerprint(ctx, seqno)
		}
	case *ordov1.Entry_Schema:
		r.cert.Skip(seqno)
		if k.Schema.Node != r.cfg.NodeID {
			r.compareSchema(k.Schema)
		}
	default:
		return fmt.Errorf("replica: entry %d is of a kind this version of Ordo does not know; upgrade this node", seqno)
	}
	r.publish(seqno)
	return nil
}

// expireAborts forgets the aborts of gids whose TxnEntry never came within
// a certification window: should it come now, its snapshot (taken before
// the abort was proposed) is too old anyway, so the decision is the same.
func (r *Replica) expireAborts(seqno uint64) {
	for gid, at := range r.aborted {
		if seqno-at > r.cfg.Window {
			delete(r.aborted, gid)
		}
	}
}

// certify decides a delivered transaction (an AbortEntry delivered before
// it aborts it) and counts the outcome.
func (r *Replica) certify(seqno uint64, e *ordov1.TxnEntry) (Outcome, error) {
	gid := txn.GID(e.Gid)
	if e.Protocol != r.cfg.Protocol {
		return Outcome{}, fmt.Errorf("replica: entry %d (%s) was proposed under protocol %q, this node runs %q", seqno, gid, e.Protocol, r.cfg.Protocol)
	}
	out := Outcome{Seqno: seqno}
	if decided, commit := r.replayed(seqno); decided {
		delete(r.aborted, gid)
		if out.Commit = commit; commit {
			r.cert.Record(seqno, decodeKeys(e))
		} else {
			r.cert.Skip(seqno)
			out.Reason = "aborted before this node restarted"
		}
		return out, nil
	}
	reason := ""
	if _, ok := r.aborted[gid]; ok {
		delete(r.aborted, gid)
		r.cert.Skip(seqno)
		out.Reason = "aborted by its origin"
		reason = "origin_abort"
	} else if e.Fragments > 0 && !r.fragmentsComplete(seqno, gid, e.Fragments) {
		r.cert.Skip(seqno)
		out.Reason = "its fragments were not all delivered within the certification window"
		reason = "too_old"
	} else {
		d := r.cert.Certify(seqno, &certifier.Request{SnapshotSeqno: e.SnapshotSeqno, Keys: decodeKeys(e), ReadAll: e.ReadAll})
		out.Commit = d.Commit
		if !d.Commit {
			out.Reason = d.Reason.String()
			reason = "too_old"
			if d.Reason == certifier.ReasonConflict {
				out.Reason = fmt.Sprintf("conflict on %s with the transaction at seqno %d", d.Key, d.By)
				reason = "certification"
			}
		}
	}
	origin := "remote"
	if e.Origin == r.cfg.NodeID {
		origin = "local"
	}
	if out.Commit {
		r.m.outcomes.WithLabelValues(r.cfg.Protocol, origin, "commit", "").Inc()
	} else {
		r.m.outcomes.WithLabelValues(r.cfg.Protocol, origin, "abort", reason).Inc()
	}
	return out, nil
}

func (r *Replica) deliverTxn(ctx context.Context, seqno uint64, e *ordov1.TxnEntry) error {
	gid := txn.GID(e.Gid)
	out, err := r.certify(seqno, e)
	if err != nil {
		return err
	}
	var frags *fragments
	if e.Fragments > 0 {
		frags = r.dropFragments(gid)
	}
	if e.Origin == r.cfg.NodeID {
		if err := r.finishLocal(ctx, seqno, gid, out.Commit, e, frags); err != nil {
			return err
		}
	} else if out.Commit {
		r.rollbackConflicting(ctx, decodeKeys(e))
		if err := r.applyEntry(ctx, seqno, e, frags); err != nil {
			return err
		}
	}
	if out.Commit && len(e.Ddl) > 0 {
		r.cfg.Applier.Forget(ctx)
		if r.cfg.OnDDL != nil {
			r.cfg.OnDDL(ctx)
		}
		if seqno > r.cfg.Proven {
			r.fingerprint(ctx, seqno)
		}
	}
	r.mu.Lock()
	if w := r.waiters[gid]; w != nil {
		w.decided = true
		w.ch <- out
	}
	r.mu.Unlock()
	return nil
}

// rollbackConflicting rolls back, before a remote transaction is applied,
// this node's undecided prepared transactions that write a key it writes:
// they hold the row locks the apply needs, and they will fail
// certification anyway (each took its snapshot before this apply, and the
// remote transaction is ordered before it). Rolling them back now instead
// of when the applier finds itself blocked saves the blocker check's
// delay; should the order commit one after all, finishLocal applies its
// write set.
func (r *Replica) rollbackConflicting(ctx context.Context, keys []txn.KeyMode) {
	var gids []txn.GID
	r.mu.Lock()
	for gid, w := range r.waiters {
		if w.decided {
			continue
		}
		for _, k := range keys {
			if k.Mode&txn.X != 0 && w.writes[k.Key] {
				gids = append(gids, gid)
				break
			}
		}
	}
	r.mu.Unlock()
	for _, gid := range gids {
		if _, err := r.conn.Exec(ctx, "ROLLBACK PREPARED '"+string(gid)+"'"); err != nil {
			// Not prepared yet or any more; the applier's blocker check
			// remains the safety net.
			r.log.Debug("early rollback of a conflicting prepared transaction", "gid", gid, "err", err)
			continue
		}
		r.rolledMu.Lock()
		r.rolledBack[gid] = true
		r.rolledMu.Unlock()
		r.m.bruteForce.Inc()
	}
}

// finishLocal commits or rolls back one of this node's prepared
// transactions.
func (r *Replica) finishLocal(ctx context.Context, seqno uint64, gid txn.GID, commit bool, e *ordov1.TxnEntry, frags *fragments) error {
	r.rolledMu.Lock()
	rolled := r.rolledBack[gid]
	delete(r.rolledBack, gid)
	r.rolledMu.Unlock()
	if rolled {
		if commit && e != nil {
			// Rolled back early to let an earlier apply through; the order
			// committed it after all: apply its rows like a remote one.
			return r.applyEntry(ctx, seqno, e, frags)
		}
		return nil
	}
	stmt := "ROLLBACK PREPARED '" + string(gid) + "'"
	if commit {
		stmt = "COMMIT PREPARED '" + string(gid) + "'"
	}
	// Not prepared (any more): already finished before a restart, or the
	// origin never got as far as PREPARE (a rollback).
	notPrepared := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "42704"
	}
	if err := r.execRetrying(ctx, stmt, notPrepared, stmt); err != nil {
		return err
	}
	if commit {
		r.proofs = append(r.proofs, proof{seqno, gid})
	}
	return nil
}

// applyEntry applies a committed remote transaction with its fragments.
func (r *Replica) applyEntry(ctx context.Context, seqno uint64, e *ordov1.TxnEntry, frags *fragments) error {
	if seqno <= r.cfg.Proven {
		return nil // replayed: it committed, so its proof row says it is applied
	}
	if err := r.flushProofs(ctx); err != nil {
		return err
	}
	ws, err := frags.writeSet(e)
	if err != nil {
		return fmt.Errorf("replica: %s at seqno %d: %w", e.Gid, seqno, err)
	}
	ws.DDL, ws.SearchPath = e.Ddl, e.SearchPath
	began := time.Now()
	if _, err := r.cfg.Applier.Apply(ctx, seqno, ws); err != nil {
		return fmt.Errorf("replica: apply %s at seqno %d: %w", e.Gid, seqno, err)
	}
	r.m.applyLatency.Observe(time.Since(began).Seconds())
	return nil
}

func (r *Replica) publish(seqno uint64) {
	r.prefix.Store(seqno)
	r.cfg.Order.MarkApplied(seqno)
	r.mu.Lock()
	close(r.prefixCh)
	r.prefixCh = make(chan struct{})
	r.mu.Unlock()
	r.m.applied.Set(float64(seqno))
}
