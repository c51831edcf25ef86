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
	// floor, after a restart that found this node's prepared
	// transactions left over, is the last index of the Raft log when the
	// node started: a commit told before the restart may be among them,
	// and snapshots wait until the applied prefix reaches it.
	floor atomic.Uint64
	// known is set, and knownCh closed, once the loop has looked for
	// leftovers (floorTold): until then snapshots wait.
	known   atomic.Bool
	knownCh chan struct{}

	mu sync.Mutex
	ch chan struct{} // closed and replaced when visible moves
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
// (its write set is applied in its place). It reports whether it told.
func (r *Replica) tellEarly(gid txn.GID, seqno uint64, ddl bool) bool {
	r.rolledMu.Lock()
	rolledBack := r.rolledBack[gid]
	r.rolledMu.Unlock()
	if ddl || rolledBack {
		return false
	}
	r.tg.told.Add(1) // before the session can act on it
	r.toldUnseen++
	r.notify(gid, Outcome{Commit: true, Seqno: seqno})
	for stallAfterTell != "" {
		if _, err := os.Stat(stallAfterTell); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// madeVisible notes that the commits told before their COMMIT PREPARED
// are visible and published (the loop calls it once the applied prefix
// covers them, or is about to).
func (r *Replica) madeVisible() {
	n := r.toldUnseen
	if n == 0 {
		return
	}
	r.toldUnseen = 0
	r.tg.mu.Lock()
	r.tg.visible.Add(n)
	if r.tg.ch != nil {
		close(r.tg.ch)
		r.tg.ch = nil
	}
	r.tg.mu.Unlock()
}

// AwaitTold returns once every local commit told to its session before
// the call is visible in PostgreSQL and within the applied prefix (and,
// after a restart that found prepared transactions of this node, once the
// prefix reaches the order's commit index at the start). A statement that
// may take a snapshot calls it first. It returns early when ctx ends or the
// loop stops (its caller's statement then fails on its own: the node no
// longer serves), and with termination.ErrReplaying if a restart's floor
// is not reached within CommitTimeout.
func (r *Replica) AwaitTold(ctx context.Context) error {
	target := r.tg.told.Load()
	if r.tg.known.Load() && r.tg.visible.Load() >= target && r.tg.floor.Load() == 0 {
		return nil // the common case: three atomic loads
	}
	began := time.Now()
	defer func() { r.m.toldWait.Observe(time.Since(began).Seconds()) }()
	if !r.tg.known.Load() {
		select {
		case <-r.tg.knownCh:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.down:
			return nil
		}
	}
	floor := r.tg.floor.Load()
	var expired <-chan time.Time
	if floor != 0 {
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
		r.mu.Lock()
		pch := r.prefixCh
		r.mu.Unlock()
		visible := r.tg.visible.Load() >= target
		floorOK := floor == 0 || r.prefix.Load() >= floor
		if visible && floorOK {
			if floor != 0 {
				r.tg.floor.CompareAndSwap(floor, 0)
			}
			return nil
		}
		if visible {
			ch = nil // only the prefix can move it on
		}
		select {
		case <-ch:
		case <-pch:
		case <-expired:
			return fmt.Errorf("%w: it restarted with prepared transactions of its own, whose commits it may have told, and has not replayed its log up to seqno %d within %s (applied: %d); is the cluster reachable?",
				termination.ErrReplaying, floor, r.cfg.CommitTimeout, r.prefix.Load())
		case <-ctx.Done():
			return ctx.Err()
		case <-r.down:
			return nil
		}
	}
}

// floorTold, as the loop starts, holds snapshots back until the applied
// prefix reaches the last index of the node's log at the start if PostgreSQL holds
// prepared transactions of this node (loadRolledBack found them): the loop
// may have told a session of one of them before it stopped, and runs its
// COMMIT PREPARED only in the replay.
func (r *Replica) floorTold() {
	defer func() {
		r.tg.known.Store(true)
		close(r.tg.knownCh)
	}()
	o, ok := r.cfg.Order.(interface{ LastAtStart() uint64 })
	r.rolledMu.Lock()
	left := len(r.orphans)
	r.rolledMu.Unlock()
	if !ok || left == 0 {
		return
	}
	if c := o.LastAtStart(); c > r.prefix.Load() {
		r.tg.floor.Store(c)
		r.log.Info("this node's prepared transactions are left over from before a restart: statements wait, before their snapshots, until the log it held is replayed",
			"prepared", left, "replay_to", c, "applied", r.prefix.Load())
	}
}
