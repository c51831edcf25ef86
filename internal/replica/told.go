package replica

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// A local transaction the order decided to commit is durable before its
// COMMIT PREPARED: PostgreSQL flushed its PREPARE, and the decision is in
// the Raft log of a majority, which a restart replays. So the loop tells
// its session at once and runs the COMMIT PREPARED (a WAL flush that
// PostgreSQL always waits for) after, off the client's path
// (docs/performance.md "The commit's last flush").
//
// The client may then act on its commit before the commit is visible in
// PostgreSQL: run its next statement, or tell another client of this node.
// What it sees must still be what it would see had the loop answered after
// the COMMIT PREPARED, so every statement that may take a snapshot first
// waits until each commit told before it is visible and in the applied
// prefix (AwaitTold): its snapshot holds them, and its snapshot_seqno
// covers them (the client's next transaction does not conflict with its
// own last one in certification).
//
// Commits whose session must find their effects in place before it goes on
// are told after their COMMIT PREPARED, as before: DDL (the node's catalog
// is reloaded first) and a transaction rolled back early by brute force
// (its write set is applied instead).
type toldGate struct {
	told    atomic.Uint64 // local commits told before they were visible
	visible atomic.Uint64 // how many of them are visible and published
	// leftover is set, after a restart, while prepared transactions of
	// this node found at the start (startLeft, under Replica.rolledMu)
	// are not carried out: a commit told before the restart may be among
	// them, and snapshots wait.
	leftover  atomic.Bool
	startLeft map[txn.GID]bool
	// known is set, and knownCh closed, once the loop has looked for
	// leftovers (holdForLeftovers): until then snapshots wait.
	known     atomic.Bool
	knownCh   chan struct{}
	knownOnce sync.Once

	mu sync.Mutex
	ch chan struct{} // closed and replaced when visible or leftover moves
}

// FaultTellStallEnv names a file: while it exists, the delivery loop stops
// right after telling a session of its commit and before that commit's
// COMMIT PREPARED (checked every 10 ms). It is a fault injection for the
// tests of what a crash there leaves (TestToldCommitVisibleAfterARestart),
// read by the node only when the variable is set: it never applies in an
// ordinary deployment.
const FaultTellStallEnv = "ORDO_FAULT_TELL_STALL_FILE"

// stallAfterTell is FaultTellStallEnv's file ("": none).
var stallAfterTell = os.Getenv(FaultTellStallEnv)

// tellEarly tells the session of gid, the node's own transaction the
// order decided to commit at seqno, before its COMMIT PREPARED, unless it
// is one the session must find in place (DDL) or one rolled back early
// (its write set is applied in its place).
func (r *Replica) tellEarly(gid txn.GID, seqno uint64, ddl bool) {
	r.rolledMu.Lock()
	rolledBack := r.rolledBack[gid]
	r.rolledMu.Unlock()
	if ddl || rolledBack {
		return
	}
	r.tg.told.Add(1) // before the session can act on it
	r.toldUnseen = true
	r.notify(gid, Outcome{Commit: true, Seqno: seqno})
	for stallAfterTell != "" {
		if _, err := os.Stat(stallAfterTell); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// showTold, once the decision at seqno that told its session early is
// carried out (its COMMIT PREPARED ran), publishes the prefix up to it and
// wakes the statements waiting for it: as far as the entries before it are
// decided and not among the decisions of the same step still to carry
// out (later, pgr and cons decide several in one step; under cons an
// earlier entry may still wait, and the prefix covers it only later).
// What the step carries out after it (applies that may wait for a lock of
// a session waiting for this commit, a vote) holds nobody back.
func (r *Replica) showTold(seqno uint64, later []termination.Decision) {
	upTo := min(r.dec.Settled(), seqno)
	for _, d := range later {
		if d.Seqno != 0 {
			upTo = min(upTo, d.Seqno-1)
		}
	}
	r.publish(upTo)
	r.toldUnseen = false
	r.tg.mu.Lock()
	r.tg.visible.Add(1)
	r.tg.wake()
	r.tg.mu.Unlock()
}

// wake wakes the statements waiting in AwaitTold (under mu).
func (g *toldGate) wake() {
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// leftoverDone notes that gid's decision is carried out (finishLocal): if
// it was the last of the prepared transactions found at the start,
// snapshots no longer wait for them.
func (r *Replica) leftoverDone(gid txn.GID) {
	r.rolledMu.Lock()
	defer r.rolledMu.Unlock()
	if !r.tg.startLeft[gid] {
		return
	}
	delete(r.tg.startLeft, gid)
	if len(r.tg.startLeft) == 0 {
		r.tg.mu.Lock()
		r.tg.leftover.Store(false)
		r.tg.wake()
		r.tg.mu.Unlock()
		r.log.Info("the prepared transactions left over from before the restart are carried out: statements no longer wait for them")
	}
}

// AwaitTold returns once every local commit told to its session before
// the call is visible in PostgreSQL and, as a rule, within the applied
// prefix (and, after a restart that found prepared transactions of this
// node, once each of them is carried out). A statement that may take a
// snapshot calls it first. It fails with termination.ErrStopped if the
// loop stopped with a told commit not visible, and with
// termination.ErrReplaying if the leftovers of a restart are not carried
// out within CommitTimeout, with termination.ErrClientCanceled once
// canceled is closed (the client's CancelRequest), and with
// termination.ErrBruteForced once aborted is closed.
func (r *Replica) AwaitTold(ctx context.Context, canceled, aborted <-chan struct{}) error {
	target := r.tg.told.Load()
	if r.tg.known.Load() && r.tg.visible.Load() >= target && !r.tg.leftover.Load() {
		return nil // the common case: three atomic loads
	}
	began := time.Now()
	defer func() { r.m.toldWait.Observe(time.Since(began).Seconds()) }()
	if !r.tg.known.Load() {
		select {
		case <-r.tg.knownCh:
		case <-canceled:
			return termination.ErrClientCanceled
		case <-aborted:
			return termination.ErrBruteForced
		case <-ctx.Done():
			return ctx.Err()
		case <-r.down:
			return termination.ErrStopped
		}
	}
	var expired <-chan time.Time
	if r.tg.leftover.Load() {
		t := time.NewTimer(r.cfg.CommitTimeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		r.tg.mu.Lock()
		if r.tg.ch == nil {
			r.tg.ch = make(chan struct{})
		}
		ch := r.tg.ch
		r.tg.mu.Unlock()
		if r.tg.visible.Load() >= target && !r.tg.leftover.Load() {
			return nil
		}
		select {
		case <-ch:
		case <-expired:
			r.rolledMu.Lock()
			left := len(r.tg.startLeft)
			r.rolledMu.Unlock()
			return fmt.Errorf("%w: it restarted with %d prepared transactions of its own whose commits it may have told before, not yet carried out after %s (applied: seqno %d); is the cluster reachable?",
				termination.ErrReplaying, left, r.cfg.CommitTimeout, r.prefix.Load())
		case <-canceled:
			return termination.ErrClientCanceled
		case <-aborted:
			return termination.ErrBruteForced
		case <-ctx.Done():
			return ctx.Err()
		case <-r.down:
			if r.tg.visible.Load() >= target && !r.tg.leftover.Load() {
				return nil
			}
			return termination.ErrStopped
		}
	}
}

// holdForLeftovers, as the loop starts, holds snapshots back while the prepared
// transactions of this node that PostgreSQL holds from before a restart
// (loadRolledBack found them) are not carried out: the loop may have told
// a session of one of them before it stopped, and runs its COMMIT
// PREPARED only when the order's decision on it is delivered again
// (those never ordered are aborted through the order: ResolveLeftovers).
func (r *Replica) holdForLeftovers() {
	defer r.tg.knownOnce.Do(func() {
		r.tg.known.Store(true)
		close(r.tg.knownCh)
	})
	r.rolledMu.Lock()
	defer r.rolledMu.Unlock()
	if len(r.orphans) == 0 {
		return
	}
	r.tg.startLeft = make(map[txn.GID]bool, len(r.orphans))
	for g := range r.orphans {
		r.tg.startLeft[g] = true
	}
	r.tg.leftover.Store(true)
	r.log.Info("prepared transactions of this node are left over from before a restart: statements wait, before their snapshots, until the order's decisions on them are carried out",
		"prepared", len(r.orphans), "applied", r.prefix.Load())
}
