// Package pgr is the decider of Postgres-R (Kemme & Alonso, VLDB 2000):
// 1-copy serializable, with read sets that never leave their origin.
//
// The origin proposes a transaction's write set and write keys (a
// TxnEntry), without its read keys. Delivery decides nothing by itself:
// the transaction stays undecided until an outcome for it is delivered (an
// OutcomeEntry, or an AbortEntry of its gid), and the first outcome
// delivered wins. Decisions are released in the order of the
// transactions' own seqnos: a decided transaction waits for every earlier
// one, so commits, applies and the applied prefix follow the total order.
//
// Only the origin certifies, and only once every earlier transaction is
// decided (it heads the queue of undecided ones): its read and write keys
// (Entry.Local, known to it alone) against the write keys of the
// transactions committed after its snapshot, by the conflict rule of
// DESIGN.md "Key modes and the conflict rule" with reads checked
// (internal/certifier, which records a transaction's write keys when its
// commit is released). Its verdict is a Proposal, which the engine puts
// in the order. An origin that does not know the read keys of its own
// transaction (it restarted after proposing it) proposes its abort.
// Aborts for a transaction whose origin failed are proposed by the engine
// when the cluster's failure detection says so; they need no decider.
//
// Before waiting for an outcome, in order, a delivered TxnEntry is decided
// at once when
//
//  1. a restarted node's proof rows give its outcome (taken as it is);
//  2. an AbortEntry of the gid was delivered earlier (its origin gave up);
//  3. its fragments were not all delivered, in order, within the
//     certification window (termination.Fragments);
//  4. its snapshot is older than the certification window.
//
// This package must never do I/O, read a clock, or decide anything from
// what is not in the delivered sequence; only Proposals may depend on
// Entry.Local.
package pgr

import (
	"fmt"

	"github.com/ordo-db/ordo/internal/certifier"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// Decider decides pgr transactions.
type Decider struct {
	node   uint32
	window uint64
	cert   *certifier.Certifier
	// queue holds the delivered transactions not yet released, in seqno
	// order; byGID indexes it.
	queue   []*pending
	byGID   map[txn.GID]*pending
	aborted map[txn.GID]uint64 // AbortEntry delivered before the TxnEntry: its seqno
	frags   *termination.Fragments
	last    uint64 // the last seqno stepped
}

// pending is a delivered transaction not yet released.
type pending struct {
	seqno   uint64
	gid     txn.GID
	origin  uint32
	snap    uint64
	keys    []txn.KeyMode // write keys, from the entry
	local   *termination.Local
	decided bool
	dec     termination.Decision
	// proposed: this node proposed its outcome (its origin certified it).
	proposed bool
	// stale is why its keys cannot be certified under the granules in
	// force (termination.Entry.GranulesStale), or "".
	stale string
}

var _ termination.Decider = (*Decider)(nil)

// New returns a pgr decider for node, with a certification window of
// window seqnos, fed entries after seqno start.
func New(node uint32, window, start uint64) (*Decider, error) {
	if window == 0 {
		return nil, fmt.Errorf("pgr: the certification window must be positive")
	}
	return &Decider{
		node:    node,
		window:  window,
		cert:    certifier.New(certifier.Config{CheckReads: true, Window: window}, start),
		byGID:   make(map[txn.GID]*pending),
		aborted: make(map[txn.GID]uint64),
		frags:   termination.NewFragments(window),
		last:    start,
	}, nil
}

// Settled returns the seqno before the oldest undecided transaction, or
// the last seqno stepped if none is undecided.
func (d *Decider) Settled() uint64 {
	if len(d.queue) > 0 {
		return d.queue[0].seqno - 1
	}
	return d.last
}

// Step feeds the entry delivered at e.Seqno.
func (d *Decider) Step(e *termination.Entry) (termination.Step, error) {
	var st termination.Step
	if d.frags.Len() > 0 {
		st.Expired = d.frags.Expire(e.Seqno)
	}
	if len(d.aborted) > 0 && e.Seqno%1024 == 0 {
		d.expireAborts(e.Seqno)
	}
	switch e.Kind {
	case termination.KindFragment:
		if _, ok := d.aborted[e.GID]; !ok { // after its abort, nothing will use it
			d.frags.Add(e.Seqno, e.GID, e.Index)
			st.Hold = true
		}
	case termination.KindAbort:
		if p := d.byGID[e.GID]; p != nil {
			d.decide(p, false, "aborted by its origin", termination.CauseOriginAbort)
			break
		}
		// Not delivered yet (or long released: then this changes
		// nothing). As under dbsm, the origin's prepared transaction is
		// rolled back now.
		d.aborted[e.GID] = e.Seqno
		d.frags.Forget(e.GID)
		st.Decisions = append(st.Decisions, termination.Decision{GID: e.GID, Origin: e.GID.Node(), Reason: "aborted by its origin", Cause: termination.CauseOriginAbort})
	case termination.KindOutcome:
		if p := d.byGID[e.GID]; p != nil && p.seqno == e.TxnSeqno {
			cause := e.Cause
			if e.Commit {
				cause = termination.CauseNone
			} else if cause == "" {
				cause = termination.CauseCertification
			}
			d.decide(p, e.Commit, e.Reason, cause)
			p.dec.Conflict = e.Conflict
		}
	case termination.KindTxn:
		if err := d.deliver(e); err != nil {
			return termination.Step{}, err
		}
	}
	d.last = e.Seqno
	st.Decisions = append(st.Decisions, d.release()...)
	if p := d.certify(); p != nil {
		st.Proposals = append(st.Proposals, *p)
	}
	return st, nil
}

// deliver queues a delivered TxnEntry, deciding it at once when the
// sequence already did.
func (d *Decider) deliver(e *termination.Entry) error {
	if e.Protocol != termination.PGR {
		return fmt.Errorf("pgr: entry %d (%s) was proposed under protocol %q, this node runs %q", e.Seqno, e.GID, e.Protocol, termination.PGR)
	}
	if d.byGID[e.GID] != nil {
		return fmt.Errorf("pgr: entry %d: transaction %s was delivered twice", e.Seqno, e.GID)
	}
	p := &pending{seqno: e.Seqno, gid: e.GID, origin: e.Origin, snap: e.SnapshotSeqno, keys: e.Keys}
	if e.Origin == d.node {
		p.local = e.Local
		p.stale = e.GranulesStale()
	}
	d.queue = append(d.queue, p)
	d.byGID[e.GID] = p
	if e.Fragments > 0 {
		// Complete or not, the engine holds its fragments until it is
		// decided: they must not expire while it waits for its outcome.
		defer d.frags.Forget(e.GID)
	}
	switch e.Replayed {
	case termination.ReplayCommit:
		delete(d.aborted, e.GID)
		d.decide(p, true, "", termination.CauseReplayed)
		return nil
	case termination.ReplayAbort:
		delete(d.aborted, e.GID)
		d.decide(p, false, "aborted before this node restarted", termination.CauseReplayed)
		return nil
	}
	if _, ok := d.aborted[e.GID]; ok {
		delete(d.aborted, e.GID)
		d.decide(p, false, "aborted by its origin", termination.CauseOriginAbort)
		return nil
	}
	if e.Fragments > 0 && !d.frags.Complete(e.Seqno, e.GID, e.Fragments) {
		d.decide(p, false, "its fragments were not all delivered within the certification window", termination.CauseTooOld)
		return nil
	}
	if e.Seqno-e.SnapshotSeqno > d.window {
		// Every node can tell, and must: an AbortEntry more than a window
		// before it (proposed after its snapshot) is forgotten by then,
		// and a node that restarted after it never saw it.
		d.decide(p, false, certifier.ReasonTooOld.String(), termination.CauseTooOld)
	}
	return nil
}

// decide records the first outcome of p; later ones change nothing.
func (d *Decider) decide(p *pending, commit bool, reason string, cause termination.Cause) {
	if p.decided {
		return
	}
	p.decided = true
	p.dec = termination.Decision{GID: p.gid, Origin: p.origin, Seqno: p.seqno, Commit: commit, Cause: cause}
	if !commit {
		p.dec.Reason = reason
	}
}

// release returns the decisions at the head of the queue, in seqno order,
// recording the write keys of the commits.
func (d *Decider) release() []termination.Decision {
	var out []termination.Decision
	i := 0
	for ; i < len(d.queue) && d.queue[i].decided; i++ {
		p := d.queue[i]
		if p.dec.Commit {
			d.cert.Record(p.seqno, p.keys)
		} else {
			d.cert.Skip(p.seqno)
		}
		delete(d.byGID, p.gid)
		out = append(out, p.dec)
		d.queue[i] = nil
	}
	d.queue = d.queue[i:]
	return out
}

// certify proposes the outcome of this node's transaction at the head of
// the queue: every earlier transaction is decided, so certification
// against the committed ones is final.
func (d *Decider) certify() *termination.Proposal {
	if len(d.queue) == 0 {
		return nil
	}
	p := d.queue[0]
	if p.decided || p.proposed || p.origin != d.node {
		return nil
	}
	p.proposed = true
	out := &termination.Proposal{GID: p.gid, TxnSeqno: p.seqno}
	if p.local == nil {
		out.Reason, out.Cause = "its origin restarted before it certified it", termination.CauseOriginGone
		return out
	}
	if p.stale != "" {
		out.Reason, out.Cause = p.stale, termination.CauseGranules
		return out
	}
	c := d.cert.CheckAt(p.seqno, &certifier.Request{SnapshotSeqno: p.snap, Keys: p.local.Keys, ReadAll: p.local.ReadAll})
	if out.Commit = c.Commit; !c.Commit {
		out.Reason, out.Cause = c.Reason.String(), termination.CauseTooOld
		if c.Reason == certifier.ReasonConflict {
			out.Reason = fmt.Sprintf("conflict on %s with the transaction at seqno %d", c.Key, c.By)
			if c.Key == (txn.Key{}) {
				out.Reason = fmt.Sprintf("an unattributed read conflicts with the transaction at seqno %d", c.By)
			}
			out.Cause, out.Conflict = termination.CauseCertification, c.Key
		}
	}
	return out
}

// expireAborts forgets the aborts of gids whose TxnEntry never came within
// a certification window (as under dbsm).
func (d *Decider) expireAborts(seqno uint64) {
	for gid, at := range d.aborted {
		if seqno-at > d.window {
			delete(d.aborted, gid)
		}
	}
}

var _ termination.Drainer = (*Decider)(nil)

// Drain aborts every undecided transaction (the cluster switched
// protocols) and returns every decision still held, in seqno order.
func (d *Decider) Drain() []termination.Decision {
	for _, p := range d.queue {
		d.decide(p, false, "the cluster switched protocols before it was decided", termination.CauseSwitch)
	}
	return d.release()
}
