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

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/schemacheck"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Protocol names (termination.DBSM, termination.DBSMSI, termination.PGR).
const (
	DBSM   = termination.DBSM
	DBSMSI = termination.DBSMSI
	DBSMRC = termination.DBSMRC
	PGR    = termination.PGR
	CONS   = termination.CONS
)

// ErrPostgresRestarted is termination.ErrPostgresRestarted, returned by
// Run when the local PostgreSQL restarted under the node.
var ErrPostgresRestarted = termination.ErrPostgresRestarted

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
	Protocol string // DBSM, DBSMSI, PGR or CONS
	// Window is the certification window (seqnos); cluster-wide.
	Window uint64
	// CommitTimeout bounds each proposal of a transaction and the wait
	// for its outcome (default 30s).
	CommitTimeout time.Duration
	// VoteTimeout bounds how long a node that could not carry out an
	// entry waits for the cluster's verdict on it (the voters needed for
	// a majority may be down or cut off): then it leaves, as if the
	// verdict were against it, and needs a rejoin. Default 10 minutes.
	VoteTimeout time.Duration
	// MaxEntryBytes is the size above which a transaction's rows are
	// split over fragments (0: never split).
	MaxEntryBytes int
	// DSN of the local PostgreSQL, superuser.
	DSN     string
	Order   Orderer
	Applier *apply.Applier
	// History are the protocol switches the node made before a restart
	// (LoadProtocolHistory): Protocol is the initial protocol only.
	History []*ordov1.ProtocolSwitch
	// StartAfter is the seqno the total order was started after; the
	// applied prefix starts there.
	StartAfter uint64
	// Proven is the last seqno the database proved applied when the node
	// started: entries up to it are replayed, not carried out anew (no
	// schema fingerprints are taken for them).
	Proven uint64
	// Members is how many voting members the cluster has when the node
	// starts: a node that cannot carry out an entry others carried out
	// asks the cluster to vote (vote.go). 0 turns votes off: such a node
	// stops. DeliveryMembers from the order (totalorder's
	// DeliverMembership) replace it with the voters at each position.
	Members int
	// Suspects, if set, returns the members the cluster's failure
	// detection takes for gone (the Raft leader's view of who stopped
	// answering; nil elsewhere): under pgr, a transaction whose origin
	// stays suspected has its abort proposed (outcomes.go).
	Suspects func() []uint32
	// OnDDL is called on the delivery loop right after a transaction
	// with DDL committed, local or remote, and before its client is told:
	// the node marks its catalog stale (every statement analyzed after it
	// waits for a refresh) and refreshes it beside the loop.
	OnDDL func(ctx context.Context)
	// OnGranules is called on the delivery loop with the granule columns
	// of the split conflict classes (classes.Granules) and their epoch,
	// once the configuration in force is loaded and whenever a change of
	// the classes changes them: the node gives them to its catalog, so
	// dbsm and pgr keys fix granules (nil: not called).
	OnGranules func(ctx context.Context, granules map[string]string, seqno uint64)
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Txn and Outcome are the termination types a session hands over and gets
// back.
type (
	Txn     = termination.Txn
	Outcome = termination.Outcome
)

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
	// committing is the largest seqno whose commit the loop has begun to
	// carry out: its effects may be visible in PostgreSQL before prefix
	// reaches it (VisiblePrefix).
	committing atomic.Uint64
	// recorded is the seqno up to which the outcomes of labelled
	// transactions are written (_ordo.applied, _ordo.aborted): the end of
	// the last batch, after its proofs were flushed (SyncRead waits for
	// it, so _ordo.txn_status after a sync read is exact).
	recorded atomic.Uint64
	failed   atomic.Pointer[error]
	// protocol is the protocol in force for new transactions (switch.go).
	protocol atomic.Pointer[string]
	// classes is the conflict-class configuration in force (classes.go).
	classes  atomic.Pointer[ordov1.ClassConfig]
	classSet atomic.Pointer[classes.Set]
	// durable is the largest seqno whose WAL PostgreSQL flushed
	// (markDurable); suspect is set while the node may have lost what was
	// not flushed (watchPostgres).
	durable atomic.Uint64
	suspect atomic.Bool
	// lastDataCheck is when the loop was last delivered a DataCheckEntry
	// (unix nanoseconds; at first, when the replica was made).
	lastDataCheck atomic.Int64

	mu       sync.Mutex
	waiters  map[txn.GID]*waiter
	prefixCh chan struct{} // closed and replaced whenever prefix moves
	// local holds, under pgr, what only the origin knows of its proposed
	// transactions (their read keys) until they are decided: the
	// decider certifies them with it (termination.Entry.Local).
	local map[txn.GID]*termination.Local
	// cons holds this node's cons transactions between Begin and their
	// TxnEntry or End (cons.go).
	cons map[txn.GID]*consTxn

	// Owned by the delivery loop.
	dec     termination.Decider
	conn    *pgx.Conn
	pending map[uint64]*ordov1.TxnEntry // delivered, not yet decided
	frags   map[txn.GID]*fragments
	fragMem int // bytes held in frags
	// pgStarted is when the local PostgreSQL started (connectLoop).
	pgStarted time.Time
	// proven holds the seqnos up to cfg.Proven that committed here
	// (proofs.go); proofs the local commits whose proof row is not
	// written yet; trimmed the seqno of the last trim of old proofs.
	proven map[uint64]bool
	proofs []proof
	// abortedLabels are labelled transactions that aborted, whose outcome
	// is not recorded yet (written with the proofs).
	abortedLabels []proof
	trimmed       uint64
	// lastProof is the largest seqno whose proof row the loop knows is
	// committed; marks are published seqnos waiting for their WAL to be
	// flushed before the total order hears they are applied (durable.go).
	lastProof uint64
	marks     []walMark
	// unmarked is the largest carried-out seqno not yet given a WAL
	// position, walChecked when the loop last read the WAL positions
	// (markDurable reads them at most every walCheckEvery).
	unmarked   uint64
	walChecked time.Time
	// rolledBack holds local prepared transactions rolled back early
	// because they blocked an apply (brute force), as _ordo.rolled_back
	// records them durably; if the order later commits one, the loop
	// applies its write set instead. orphans holds this node's prepared
	// transactions that no session waits for and the order has not
	// decided (bruteforce.go).
	rolledMu   sync.Mutex
	rolledBack map[txn.GID]bool
	orphans    map[txn.GID]bool

	schema schemaState
	data   dataState
	// votes tallies the results of entries some node could not carry
	// out; skipped holds the entries this node skipped by a verdict;
	// held the deliveries read from the order while it waited for one,
	// delivered before any other (delivery loop only).
	votes   *termination.Votes
	skipped map[uint64]bool
	held    []totalorder.Delivery
	// tail is what deliverBatch (or a vote) has delivered but not
	// stepped yet, before held: votes among it count toward a verdict.
	tail []totalorder.Delivery
	// suspects are the origins taken for gone and since when; goneAborts
	// the undecided transactions whose abort this node proposed because
	// their origin was gone (outcomes.go; delivery loop only).
	suspects   map[uint32]time.Time
	goneAborts map[txn.GID]bool
	// loopProtocol is the protocol of the decider; history the switches,
	// persisted; everInForce every protocol in force at some point
	// (switch.go; delivery loop only). since is the seqno of the latest
	// switch (guarded by mu).
	loopProtocol string
	history      []*ordov1.ProtocolSwitch
	everInForce  map[string]bool
	since        uint64
	// begun are the cons transactions holding or waiting for classes,
	// with their origin (delivery loop only).
	begun map[txn.GID]uint32
	// leftoverBefore, once ResolveLeftovers has caught up, is the GID
	// counter below which this node's own transactions are from before
	// its restart (their sessions died with the process).
	leftoverBefore atomic.Uint64
	// hot counts the keys certification aborts conflicted on (hot.go).
	hot hotTracker

	// bfConn is RollbackUndecided's connection (called often under
	// contention: one connection, not one per call).
	bfMu   sync.Mutex
	bfConn *pgx.Conn

	// exportc carries requests for an exported snapshot to the delivery
	// loop (donate.go).
	exportc chan exportReq

	// tg holds back snapshots until the commits told before their
	// COMMIT PREPARED are visible (told.go); toldUnseen: the loop told
	// one whose step has not made it visible yet.
	tg         toldGate
	toldUnseen bool

	// down is closed when the delivery loop fails or stops.
	down     chan struct{}
	downOnce sync.Once

	bg sync.WaitGroup
	// retrying holds the background proposals whose first attempt failed
	// (background.go); retrier: its goroutine is running.
	retryMu  sync.Mutex
	retrying []*retryItem
	retrier  bool
	// bgClosed: Run is waiting for bg, and no goroutine from outside the
	// loop may join it (an Add from zero concurrent with Wait is a
	// misuse the WaitGroup may panic on). Under retryMu.
	bgClosed bool
}

// New returns a Replica; Run starts its delivery loop.
func New(cfg Config) (*Replica, error) {
	if cfg.Window == 0 {
		cfg.Window = 100000
	}
	atStart, latest := protocolAt(&cfg, cfg.StartAfter)
	dec, err := newDecider(atStart, cfg.NodeID, cfg.Window, cfg.StartAfter)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if cfg.VoteTimeout <= 0 {
		cfg.VoteTimeout = 10 * time.Minute
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replica{
		cfg:          cfg,
		log:          cfg.Logger,
		m:            newMetrics(cfg.Registerer),
		waiters:      make(map[txn.GID]*waiter),
		local:        make(map[txn.GID]*termination.Local),
		cons:         make(map[txn.GID]*consTxn),
		begun:        make(map[txn.GID]uint32),
		loopProtocol: atStart,
		everInForce:  map[string]bool{cfg.Protocol: true},
		history:      cfg.History,
		suspects:     make(map[uint32]time.Time),
		goneAborts:   make(map[txn.GID]bool),
		prefixCh:     make(chan struct{}),
		dec:          dec,
		pending:      make(map[uint64]*ordov1.TxnEntry),
		frags:        make(map[txn.GID]*fragments),
		rolledBack:   make(map[txn.GID]bool),
		orphans:      make(map[txn.GID]bool),
		down:         make(chan struct{}),
		tg:           toldGate{knownCh: make(chan struct{})},
		exportc:      make(chan exportReq),
		votes:        termination.NewVotes(cfg.Members),
		skipped:      make(map[uint64]bool),
	}
	now := cfg.Protocol
	for _, s := range cfg.History {
		r.everInForce[s.Name] = true
	}
	if latest != nil {
		now, r.since = latest.Name, latest.Seqno
	}
	r.m.initOutcomes(now)
	r.protocol.Store(&now)
	r.schema.own = make(map[uint64]schemacheck.Snapshot)
	// Everything up to the proven prefix is in the database already: a
	// snapshot taken while the node replays up to it is that recent (a
	// snapshot_seqno of StartAfter would make the first transactions after
	// a restart abort for conflicts they did not have).
	r.prefix.Store(max(cfg.StartAfter, cfg.Proven))
	r.recorded.Store(r.prefix.Load())
	r.durable.Store(max(cfg.StartAfter, cfg.Proven))
	r.lastDataCheck.Store(time.Now().UnixNano())
	return r, nil
}

// Name returns the protocol name (DBSM, DBSMSI or PGR).
func (r *Replica) Name() string { return *r.protocol.Load() }

// CertifiesReads reports whether read keys are certified (dbsm, and pgr,
// where they stay at the origin).
func (r *Replica) CertifiesReads() bool { p := r.Name(); return p == DBSM || p == PGR }

// AppliedPrefix returns the largest seqno s such that every entry up to s
// has been carried out on the local PostgreSQL.
//
// While the node suspects its PostgreSQL crashed (durable.go: it may have
// lost commits that were visible but not yet flushed), it is the prefix
// known to be flushed instead: a snapshot_seqno must never claim what the
// database may no longer hold.
func (r *Replica) AppliedPrefix() uint64 {
	if r.suspect.Load() {
		return min(r.prefix.Load(), r.durable.Load())
	}
	return r.prefix.Load()
}

// VisiblePrefix returns the applied prefix once it covers every commit
// that may have been visible in PostgreSQL when it was called: it waits
// (at most visibleWait) for the commits the loop was carrying out then to
// be published, and returns the prefix as it is if they are not (a
// commit waiting for a lock of the caller's transaction cannot finish).
// dbsm-rc certifies a transaction that ended after its writes against it
// (docs/configuration.md).
func (r *Replica) VisiblePrefix(ctx context.Context) uint64 {
	target := r.committing.Load()
	timer := time.NewTimer(visibleWait)
	defer timer.Stop()
	for {
		r.mu.Lock()
		ch := r.prefixCh
		r.mu.Unlock()
		if r.prefix.Load() >= target {
			break
		}
		select {
		case <-ch:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	return r.AppliedPrefix()
}

// visibleWait bounds VisiblePrefix's wait.
const visibleWait = 200 * time.Millisecond

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
	if err := r.WaitApplied(ctx, idx); err != nil {
		return err
	}
	// The outcome rows of labelled transactions are written at the end of
	// the batch that decided them, after the prefix is published: wait
	// for that end too (bounded: a prefix published outside a batch has
	// nothing to record, and the end of a batch on a loaded machine can
	// take seconds: 2 s was too short once, and _ordo.txn_status after a
	// sync read said 'unknown' for an abort this node had decided).
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for r.recorded.Load() < idx {
		r.mu.Lock()
		ch := r.prefixCh
		r.mu.Unlock()
		if r.recorded.Load() >= idx {
			break
		}
		select {
		case <-ch:
		case <-limit.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Err returns why the node refuses updates, or nil.
func (r *Replica) Err() error {
	if p := r.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *Replica) fail(err error) {
	if errors.Is(err, errLeaves) || deterministic(err) {
		// Its database differs from the others' (an apply PostgreSQL
		// would refuse again: a row missing or there twice, a
		// constraint), or the cluster could not say whether it does.
		err = fmt.Errorf("%w: %w", termination.ErrInconsistent, err)
	} else {
		// Its database is as the order left it (a disk full, PostgreSQL
		// restarted, the order stopped): a restart replays the rest. It
		// said it was inconsistent.
		err = fmt.Errorf("%w: %w%s", termination.ErrStopped, err, resourceHint(err))
	}
	if r.failed.CompareAndSwap(nil, &err) {
		r.log.Error("node stops accepting updates", "err", err)
	}
	r.stopWaiting()
}

// resourceHint says what to do when PostgreSQL stopped the order for want
// of a resource (SQLSTATE class 53). PostgreSQL's own message does not
// always say: a short write of a full disk reads "could not extend file
// …: wrote only 4096 of 8192 bytes", with no "No space left on device".
func resourceHint(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return ""
	}
	switch pe.Code {
	case "53100":
		return " (PostgreSQL's disk is full: make room, then restart the node, which replays the rest of the order)"
	case "53200":
		return " (PostgreSQL is out of memory: restart the node once it has memory, and it replays the rest of the order)"
	}
	return ""
}

// stopWaiting wakes every session waiting for an outcome the loop will no
// longer carry out (it failed or stopped).
func (r *Replica) stopWaiting() { r.downOnce.Do(func() { close(r.down) }) }

// Terminate proposes t and waits for its outcome. The transaction must be
// prepared under t.GID on the local PostgreSQL; the delivery loop commits
// or rolls it back.
func (r *Replica) Terminate(ctx context.Context, t *Txn) (Outcome, error) {
	if err := r.Err(); err != nil {
		return Outcome{}, err
	}
	if r.isRolledBack(t.GID) {
		// Rolled back early (it blocked an apply) before its write set
		// was in hand: PostgreSQL's decoder, finding the transaction
		// aborted part-way, still sends its PREPARE, with only the
		// changes it decoded before. Proposed, such a write set would
		// commit as if whole. (One rolled back after the write set was
		// in hand is whole: the loop applies it should the order
		// commit it.) Its abort is ordered, so that the outcome check
		// answers "aborted" for its label, not "unknown".
		r.abortInBackground(t.GID, t.Label)
		return Outcome{}, fmt.Errorf("%w: %w", termination.ErrNotReplicated, termination.ErrPreempted)
	}
	began := time.Now()
	if t.WriteSet != nil {
		r.m.writeRows.Observe(float64(len(t.WriteSet.Rows)))
	}
	if r.CertifiesReads() || t.Serializable {
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
	protocol := r.Name() // in force when it terminates: its entry says so
	if protocol == PGR {
		// The read keys stay here: the entry carries the write keys only.
		r.local[t.GID] = &termination.Local{Keys: t.Keys, ReadAll: t.ReadAll}
		t = writeKeysOnly(t)
	}
	r.mu.Unlock()
	if protocol == CONS {
		c := *t
		c.BeginSeqno = r.beginSeqno(t.GID)
		t = &c
	}
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
	payload, err := encodeTxn(t, protocol, r.cfg.MaxEntryBytes, func(payload []byte) error {
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
			r.abortInBackground(t.GID, t.Label)
		} else {
			r.forgetRolledBack(t.GID) // never proposed: nothing will finish it
			r.forgetLocal(t.GID)
			r.releaseUnproposed(t)
		}
		switch {
		case fragErr == nil:
			// Nothing decides a transaction that was never proposed whole:
			// the session rolls it back.
			if where := notUTF8(t); where != "" {
				return Outcome{}, fmt.Errorf("%w: %s", termination.ErrNotUTF8, where)
			}
			return Outcome{}, fmt.Errorf("%w: encode %s: %w", termination.ErrNotReplicated, t.GID, err)
		case errors.Is(err, totalorder.ErrTooLarge):
			return Outcome{}, fmt.Errorf("%w: %w", termination.ErrTooLarge, err)
		default:
			return Outcome{}, fmt.Errorf("%w: %w", termination.ErrNotReplicated, err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.CommitTimeout)
	defer cancel()
	if _, err := r.cfg.Order.Propose(pctx, payload); err != nil {
		if errors.Is(err, totalorder.ErrTooLarge) {
			if proposed > 0 {
				r.abortInBackground(t.GID, t.Label)
			} else {
				r.forgetRolledBack(t.GID)
				r.forgetLocal(t.GID)
				r.releaseUnproposed(t)
			}
			return Outcome{}, fmt.Errorf("%w: %w", termination.ErrTooLarge, err)
		}
		r.abortInBackground(t.GID, t.Label)
		// The entry may still be ordered (a commit slower than the
		// timeout), or may have been lost on its way to the leader (on a
		// stream that broke under it: nothing tells this node). Whichever
		// of it and its abort is delivered first decides: in a cluster
		// that orders again, the client hears the outcome, not that it
		// is unknown.
		if o, ok := r.awaitOutcome(ctx, w); ok {
			if o.Unordered {
				o.Reason = fmt.Sprintf("its commit was not ordered in time (%v), and its abort was", err)
			}
			return o, nil
		}
		return Outcome{}, fmt.Errorf("%w: %w", termination.ErrUnknownOutcome, err)
	}
	// The entry is committed in the order and handed to this node's
	// delivery stream: the sequence decides it, and the loop carries the
	// decision out however long that takes. Only a client gone, or a loop
	// that stopped, leaves the outcome unknown to the session (08007 means
	// exactly that, never a wait that merely timed out).
	select {
	case o := <-w.ch:
		r.m.commitLatency.Observe(time.Since(began).Seconds())
		return o, nil
	case <-ctx.Done():
		r.orphan(t.GID)
		return Outcome{}, fmt.Errorf("%w: %w", termination.ErrUnknownOutcome, ctx.Err())
	case <-r.down:
		r.orphan(t.GID)
		return Outcome{}, fmt.Errorf("%w: this node stopped carrying out the order", termination.ErrUnknownOutcome)
	}
}

// resolveWait bounds how long Terminate waits, after its entry was not
// ordered in time, for the order to decide between it and its abort.
const resolveWait = 5 * time.Second

// awaitOutcome waits a while (resolveWait, at most CommitTimeout) for w's
// outcome; ok is false if none came.
func (r *Replica) awaitOutcome(ctx context.Context, w *waiter) (o Outcome, ok bool) {
	if l, known := r.cfg.Order.(interface{ Leader() uint64 }); known && l.Leader() == 0 {
		// No leader (cut off from the majority, or an election): its
		// abort cannot be ordered any sooner; say so now.
		return Outcome{}, false
	}
	t := time.NewTimer(min(resolveWait, r.cfg.CommitTimeout))
	defer t.Stop()
	select {
	case o := <-w.ch:
		return o, true
	case <-t.C:
	case <-ctx.Done():
	case <-r.down:
	}
	return Outcome{}, false
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

// abortInBackground proposes an AbortEntry for gid until one is committed.
// Whichever of the transaction and the abort is delivered first decides.
//
// Until the order decides gid, it is an orphan: an apply it blocks rolls it
// back (RollbackUndecided).
func (r *Replica) abortInBackground(gid txn.GID, label string) {
	r.orphan(gid)
	payload, err := encodeAbort(gid, label)
	if err != nil {
		r.log.Error("encode abort", "gid", gid, "err", err)
		return
	}
	r.proposeInBackground(payload, untilTaken, "the abort of "+string(gid), func(err error) {
		r.log.Error("could not propose the abort of a prepared transaction; it stays prepared until this node starts again, which aborts it", "gid", gid, "err", err)
	})
}

// AbortLabelled implements termination.LabelAborter: an AbortEntry for
// gid under label, as for a transaction preempted before its capture.
func (r *Replica) AbortLabelled(gid txn.GID, label string) { r.abortInBackground(gid, label) }

// CountBruteForce counts a local transaction aborted by brute force
// before it reached the order (it blocked an apply while it ran).
func (r *Replica) CountBruteForce() {
	r.m.outcomes.WithLabelValues(r.Name(), "local", "abort", "brute_force").Inc()
}

// LeftoversWait is ResolveLeftovers' error while the node cannot catch up
// with the cluster (no quorum yet, as while the other nodes of a cluster
// started one at a time are still starting). Leftovers is how many of
// this node's own transactions from before its restart it found prepared
// or waiting for an outcome: zero on a node that left nothing behind, for
// which the wait is only start-up's.
type LeftoversWait struct {
	Leftovers int
	Err       error
}

func (e *LeftoversWait) Error() string {
	return fmt.Sprintf("replica: catch up before resolving %d prepared transactions left over from before a restart: %v", e.Leftovers, e.Err)
}

func (e *LeftoversWait) Unwrap() error { return e.Err }

// ResolveLeftovers aborts this node's prepared transactions left over from
// before a restart whose outcome the order never delivered: it waits until
// the node has caught up with the cluster, then proposes an AbortEntry for
// each prepared transaction of this node with a gid counter below before
// (gids of sessions of this incarnation are larger). Whichever of the
// transaction and its abort is delivered first decides, on every node.
// While it cannot catch up it returns a *LeftoversWait.
func (r *Replica) ResolveLeftovers(ctx context.Context, before uint64) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	defer conn.Close(context.Background())
	if err := r.SyncRead(ctx); err != nil {
		// How many there are, for the caller's message: those the
		// catching up will carry out among them, too.
		gids, lerr := r.leftovers(ctx, conn, before)
		if lerr != nil {
			return lerr
		}
		return &LeftoversWait{Leftovers: len(gids), Err: err}
	}
	gids, err := r.leftovers(ctx, conn, before)
	if err != nil {
		return err
	}
	for _, g := range gids {
		r.log.Warn("aborting a prepared transaction left over from before a restart", "gid", g)
		r.abortInBackground(txn.GID(g), "")
	}
	// Under cons, transactions begun before the restart may hold
	// conflict classes with nothing prepared; the loop releases them
	// (abortLeftoverBegun).
	r.leftoverBefore.Store(before)
	return nil
}

// leftovers lists this node's transactions from before its restart (gid
// counters below before) that are prepared, or that the loop found
// prepared at its start and has not carried out: one rolled back early
// since (it blocked an apply) is no longer prepared, and statements wait
// for it (told.go) until an outcome is ordered.
func (r *Replica) leftovers(ctx context.Context, conn *pgx.Conn, before uint64) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return nil, fmt.Errorf("replica: list prepared transactions: %w", err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("replica: list prepared transactions: %w", err)
	}
	r.rolledMu.Lock()
	for g := range r.tg.startLeft {
		gids = append(gids, string(g))
	}
	r.rolledMu.Unlock()
	slices.Sort(gids)
	gids = slices.Compact(gids)
	return slices.DeleteFunc(gids, func(g string) bool {
		node, counter, err := txn.ParseGID(g)
		return err != nil || node != r.cfg.NodeID || counter >= before
	}), nil
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
		return nil, fmt.Errorf("%w (it started at %s, not %s)", termination.ErrPostgresRestarted, started.Format(time.RFC3339), r.pgStarted.Format(time.RFC3339))
	}
	return conn, nil
}
