// Package cons is the decider of the conservative protocol with conflict
// classes (Patiño-Martínez et al.; Kemme et al.; paper 003 Sect. 2):
// 1-copy serializable without certification, so without aborts from
// conflicts.
//
// A transaction's origin proposes a BeginEntry with the classes the
// transaction declared before the transaction takes its snapshot. Every
// node queues it behind the earlier transactions, in delivery order, that
// hold a conflicting class (txn.ClassRef.Conflicts: the same class, unless
// both are different partitions of a split class; "*" conflicts with
// everything); this is a FIFO per class, with partitions of a split class
// as classes of their own. Once it heads every queue it is Granted, and its
// origin runs it: everything that conflicts with it was carried out before
// its snapshot. Its TxnEntry commits at delivery; its classes are
// released once that decision is carried out, or when an AbortEntry of
// its gid is delivered (it wrote nothing, rolled back, or its origin is
// gone). A TxnEntry is decided abort, on every node alike, when
//
//  1. a restarted node's proof rows say so (taken as they are);
//  2. an AbortEntry of its gid came first;
//  3. its fragments were not all delivered within the window;
//  4. it began more than a certification window before (a node that
//     restarted since knows nothing of that BeginEntry, nor of an
//     AbortEntry after it).
//
// This package must never do I/O, read a clock, or decide anything from
// what is not in the delivered sequence.
package cons

import (
	"fmt"
	"slices"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// Decider decides cons transactions and grants their classes.
type Decider struct {
	window  uint64
	held    []*holder // begun, not released, in delivery order
	byGID   map[txn.GID]*holder
	aborted map[txn.GID]uint64 // AbortEntry delivered before the TxnEntry: its seqno
	frags   *termination.Fragments
	last    uint64
}

type holder struct {
	gid     txn.GID
	classes []txn.ClassRef
	granted bool
}

var _ termination.Decider = (*Decider)(nil)

// New returns a cons decider with a certification window of window
// seqnos, fed entries after seqno start.
func New(window, start uint64) (*Decider, error) {
	if window == 0 {
		return nil, fmt.Errorf("cons: the certification window must be positive")
	}
	return &Decider{window: window, byGID: map[txn.GID]*holder{}, aborted: map[txn.GID]uint64{},
		frags: termination.NewFragments(window), last: start}, nil
}

// Settled returns the last seqno stepped: every entry is decided at its
// delivery (a transaction waiting for its classes has no entry to decide).
func (d *Decider) Settled() uint64 { return d.last }

// Step feeds the entry delivered at e.Seqno.
func (d *Decider) Step(e *termination.Entry) (termination.Step, error) {
	var st termination.Step
	if d.frags.Len() > 0 {
		st.Expired = d.frags.Expire(e.Seqno)
	}
	if len(d.aborted) > 0 && e.Seqno%1024 == 0 {
		for gid, at := range d.aborted {
			if e.Seqno-at > d.window {
				delete(d.aborted, gid)
			}
		}
	}
	switch e.Kind {
	case termination.KindBegin:
		if _, ok := d.aborted[e.GID]; !ok && d.byGID[e.GID] == nil {
			h := &holder{gid: e.GID, classes: slices.Clone(e.Classes)}
			d.held = append(d.held, h)
			d.byGID[e.GID] = h
		}
	case termination.KindFragment:
		if _, ok := d.aborted[e.GID]; !ok {
			d.frags.Add(e.Seqno, e.GID, e.Index)
			st.Hold = true
		}
	case termination.KindAbort:
		d.aborted[e.GID] = e.Seqno
		d.frags.Forget(e.GID)
		d.release(e.GID)
		st.Decisions = []termination.Decision{{GID: e.GID, Origin: e.GID.Node(), Reason: "aborted by its origin", Cause: termination.CauseOriginAbort}}
	case termination.KindTxn:
		dec, err := d.decide(e)
		if err != nil {
			return termination.Step{}, err
		}
		d.release(e.GID)
		st.Decisions = []termination.Decision{dec}
	}
	d.last = e.Seqno
	st.Granted = d.grant()
	return st, nil
}

// decide decides a delivered TxnEntry.
func (d *Decider) decide(e *termination.Entry) (termination.Decision, error) {
	if e.Protocol != termination.CONS {
		return termination.Decision{}, fmt.Errorf("cons: entry %d (%s) was proposed under protocol %q, this node runs %q", e.Seqno, e.GID, e.Protocol, termination.CONS)
	}
	out := termination.Decision{GID: e.GID, Origin: e.Origin, Seqno: e.Seqno}
	if e.Fragments > 0 {
		defer d.frags.Forget(e.GID)
	}
	switch e.Replayed {
	case termination.ReplayCommit:
		delete(d.aborted, e.GID)
		out.Commit, out.Cause = true, termination.CauseReplayed
		return out, nil
	case termination.ReplayAbort:
		delete(d.aborted, e.GID)
		out.Reason, out.Cause = "aborted before this node restarted", termination.CauseReplayed
		return out, nil
	}
	if _, ok := d.aborted[e.GID]; ok {
		delete(d.aborted, e.GID)
		out.Reason, out.Cause = "aborted by its origin", termination.CauseOriginAbort
		return out, nil
	}
	if e.Fragments > 0 && !d.frags.Complete(e.Seqno, e.GID, e.Fragments) {
		out.Reason, out.Cause = "its fragments were not all delivered within the certification window", termination.CauseTooOld
		return out, nil
	}
	if e.BeginSeqno == 0 || e.BeginSeqno >= e.Seqno || e.Seqno-e.BeginSeqno > d.window {
		out.Reason, out.Cause = "it held its conflict classes for more than the certification window", termination.CauseTooOld
		return out, nil
	}
	out.Commit = true
	return out, nil
}

// release drops gid's classes.
func (d *Decider) release(gid txn.GID) {
	if d.byGID[gid] == nil {
		return
	}
	delete(d.byGID, gid)
	d.held = slices.DeleteFunc(d.held, func(h *holder) bool { return h.gid == gid })
}

// grant returns the transactions that now head every queue they are in:
// no earlier holder declared a conflicting class.
func (d *Decider) grant() []txn.GID {
	var out []txn.GID
	for i, h := range d.held {
		if h.granted {
			continue
		}
		blocked := false
		for _, earlier := range d.held[:i] {
			if conflicts(earlier.classes, h.classes) {
				blocked = true
				break
			}
		}
		if !blocked {
			h.granted = true
			out = append(out, h.gid)
		}
	}
	return out
}

func conflicts(a, b []txn.ClassRef) bool {
	for _, x := range a {
		for _, y := range b {
			if x.Conflicts(y) {
				return true
			}
		}
	}
	return false
}
