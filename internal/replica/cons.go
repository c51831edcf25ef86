package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Conflict classes (cons). A session's transaction proposes a BeginEntry
// with its classes and waits (Begin) until the decider grants them: the
// delivery loop hands the grant over only once every decision of the same
// step is carried out, so every earlier conflicting transaction is in the
// database before the granted one takes its snapshot. Its TxnEntry names
// the seqno of its BeginEntry (the decider aborts one that held its
// classes for over a window). One that ends without a TxnEntry releases
// its classes with an AbortEntry (End). A gone origin's classes are
// released the same way by whichever node sees it gone (outcomes.go).

var _ termination.ClassScheduler = (*Replica)(nil)
var _ termination.LabelAborter = (*Replica)(nil)

// consTxn is a cons transaction of this node between Begin and its end.
type consTxn struct {
	granted  chan struct{}
	begin    uint64 // seqno of its BeginEntry
	switched bool   // closed granted because the cluster switched protocols
	released bool   // closed granted because the cluster aborted it first
}

// ErrClassesNotGranted is returned by Begin when the transaction's
// classes were not granted before ctx ended (its abort is ordered).
var ErrClassesNotGranted = errors.New("replica: the transaction's conflict classes were not granted in time")

// Begin implements termination.ClassScheduler.
func (r *Replica) Begin(ctx context.Context, gid txn.GID, refs []txn.ClassRef) error {
	if err := r.Err(); err != nil {
		return err
	}
	b := &ordov1.BeginEntry{Gid: string(gid), Origin: r.cfg.NodeID}
	for _, c := range refs {
		b.Classes = append(b.Classes, &ordov1.ClassRef{Name: c.Name, Label: c.Label, Value: c.Value})
	}
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Begin{Begin: b}})
	if err != nil {
		return err
	}
	ct := &consTxn{granted: make(chan struct{})}
	r.mu.Lock()
	r.cons[gid] = ct
	r.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, r.cfg.CommitTimeout)
	seqno, err := r.cfg.Order.Propose(pctx, payload)
	cancel()
	if err != nil {
		r.End(gid)
		return fmt.Errorf("replica: propose the transaction's conflict classes: %w", err)
	}
	r.mu.Lock()
	ct.begin = seqno
	r.mu.Unlock()
	select {
	case <-ct.granted:
		r.mu.Lock()
		switched, released := ct.switched, ct.released
		r.mu.Unlock()
		if released { // its abort is in the order: nothing to release
			r.mu.Lock()
			delete(r.cons, gid)
			r.mu.Unlock()
			return termination.ErrClassesReleased
		}
		if switched {
			r.End(gid)
			return ErrProtocolSwitched
		}
		return nil
	case <-ctx.Done():
		r.End(gid)
		return fmt.Errorf("%w (%v): %w", ErrClassesNotGranted, refs, ctx.Err())
	case <-r.down:
		r.End(gid)
		return fmt.Errorf("%w: this node stopped carrying out the order", ErrClassesNotGranted)
	}
}

// End implements termination.ClassScheduler: the transaction ended
// without a TxnEntry; its classes are released through the order.
func (r *Replica) End(gid txn.GID) {
	r.mu.Lock()
	_, ok := r.cons[gid]
	delete(r.cons, gid)
	r.mu.Unlock()
	if !ok {
		return
	}
	r.releaseClasses(gid)
}

// releaseClasses proposes an AbortEntry of gid, which releases its
// classes on every node.
func (r *Replica) releaseClasses(gid txn.GID) {
	payload, err := encodeAbort(gid, "")
	if err != nil {
		return
	}
	r.proposeInBackground(payload, untilTaken, "the release of the conflict classes of "+string(gid), func(err error) {
		r.log.Error("could not release a transaction's conflict classes; they are released once the cluster takes this node for gone", "gid", gid, "err", err)
	})
}

// releaseUnproposed releases the classes of a cons transaction whose
// TxnEntry could not be proposed at all (its encoding failed: a value
// that is not UTF-8, from a database in another encoding; or the order
// refused it as too large). beginSeqno forgot it, so the session's End
// no longer can, and the decider releases classes only at a TxnEntry or
// an AbortEntry: every conflicting transaction in the cluster would wait
// for good.
func (r *Replica) releaseUnproposed(t *Txn) {
	if t.BeginSeqno != 0 {
		r.releaseClasses(t.GID)
	}
}

// beginSeqno returns the seqno of gid's BeginEntry and forgets gid (its
// TxnEntry is being proposed: its commit releases the classes).
func (r *Replica) beginSeqno(gid txn.GID) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ct := r.cons[gid]
	delete(r.cons, gid)
	if ct == nil {
		return 0
	}
	return ct.begin
}

// grant wakes the session waiting for gid's classes (delivery loop).
func (r *Replica) grant(gid txn.GID) { r.wake(gid, false) }

// released wakes the session waiting for gid's classes when the cluster
// aborted gid before granting them (delivery loop): another node took
// this one for gone and ordered its release. The session used to wait out
// class_wait for a grant that could no longer come.
func (r *Replica) released(gid txn.GID) { r.wake(gid, true) }

// wake wakes the session waiting for gid's classes, once.
func (r *Replica) wake(gid txn.GID, released bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ct := r.cons[gid]; ct != nil {
		select {
		case <-ct.granted:
		default:
			ct.released = released
			close(ct.granted)
		}
	}
}

// ClassSet returns the configuration in force, built once per change.
func (r *Replica) ClassSet() classes.Set {
	cfg := r.Classes()
	if cs := r.classSet.Load(); cs != nil && cs.Config == cfg {
		return *cs
	}
	built, err := classes.Build(cfg)
	if err != nil { // checked when applied: cannot happen
		r.log.Error("the conflict classes in force do not check out", "err", err)
		built, _ = classes.Build(nil)
	}
	cs := &classes.Set{Config: cfg, Classes: built}
	r.classSet.Store(cs)
	return *cs
}

// abortLeftoverBegun orders the release of the classes of this node's own
// cons transactions begun before it restarted (delivery loop, every
// suspectEvery). Their sessions died with the process, and with nothing
// prepared ResolveLeftovers does not see them; the failure detection
// does not name a node that is back either, so every transaction of
// those classes waited until the commit timeout.
func (r *Replica) abortLeftoverBegun() {
	before := r.leftoverBefore.Load()
	if before == 0 {
		return
	}
	for gid, origin := range r.begun {
		if origin != r.cfg.NodeID || r.goneAborts[gid] {
			continue
		}
		if node, counter, err := txn.ParseGID(string(gid)); err != nil || node != r.cfg.NodeID || counter >= before {
			continue
		}
		r.goneAborts[gid] = true
		r.log.Warn("a transaction begun before this node restarted holds conflict classes: their release is proposed", "gid", gid)
		payload, err := encodeAbort(gid, "")
		if err != nil {
			continue
		}
		r.proposeInBackground(payload, untilTaken, "the release of the conflict classes of "+string(gid), func(err error) {
			r.log.Error("could not propose the release of a leftover transaction's conflict classes", "gid", gid, "err", err)
		})
	}
}

// abortGoneBegun orders the release of the classes of transactions whose
// origin is gone (delivery loop, with abortGone).
func (r *Replica) abortGoneBegun(now time.Time) {
	for gid, origin := range r.begun {
		since, gone := r.suspects[origin]
		if !gone || now.Sub(since) < suspectGrace || r.goneAborts[gid] {
			continue
		}
		r.goneAborts[gid] = true
		r.log.Warn("the origin of a transaction holding conflict classes is gone: their release is proposed", "gid", gid, "origin", origin)
		payload, err := encodeAbort(gid, "")
		if err != nil {
			continue
		}
		r.proposeInBackground(payload, untilTaken, "the release of the conflict classes of "+string(gid), func(err error) {
			r.log.Error("could not propose the release of a gone origin's conflict classes", "gid", gid, "err", err)
		})
	}
}
