// Package dbsm is the decider of the Database State Machine protocols,
// dbsm (1-copy serializable: read and write keys certified), dbsm-si
// (1-copy snapshot isolation: write keys only) and dbsm-rc (write keys
// only, against a later snapshot). Under dbsm-si and dbsm-rc, a
// transaction that ran at SERIALIZABLE (Entry.Serializable) has its read
// keys certified too, as under dbsm.
//
// Every node certifies every transaction at its delivery, by the conflict
// rule of DESIGN.md "Key modes and the conflict rule" (internal/certifier),
// so every TxnEntry is decided the moment it is delivered, and the commit
// order is the delivery order. Before certification, in order:
//
//  1. an outcome a restarted node's proof rows give is taken as it is;
//  2. an AbortEntry of the gid delivered earlier aborts it (the first
//     outcome delivered wins; an AbortEntry is remembered for one
//     certification window);
//  3. a transaction whose fragments were not all delivered, in order,
//     within the window aborts (termination.Fragments).
//
// This package must never do I/O, read a clock, or decide anything from
// what is not in the delivered sequence.
package dbsm

import (
	"fmt"

	"github.com/ordo-db/ordo/internal/certifier"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// Decider decides dbsm or dbsm-si transactions.
type Decider struct {
	protocol string
	window   uint64
	cert     *certifier.Certifier
	aborted  map[txn.GID]uint64 // AbortEntry delivered before the TxnEntry: its seqno
	frags    *termination.Fragments
	settled  uint64
}

var _ termination.Decider = (*Decider)(nil)

// New returns a decider for protocol (termination.DBSM, DBSMSI or DBSMRC;
// the last two certify write keys only, and differ only in the
// snapshot_seqno their sessions give) with a certification window of
// window seqnos, fed entries after seqno start.
func New(protocol string, window, start uint64) (*Decider, error) {
	if protocol != termination.DBSM && protocol != termination.DBSMSI && protocol != termination.DBSMRC {
		return nil, fmt.Errorf("dbsm: unknown protocol %q (want %s, %s or %s)", protocol, termination.DBSM, termination.DBSMSI, termination.DBSMRC)
	}
	if window == 0 {
		return nil, fmt.Errorf("dbsm: the certification window must be positive")
	}
	return &Decider{
		protocol: protocol,
		window:   window,
		cert:     certifier.New(certifier.Config{CheckReads: protocol == termination.DBSM, Window: window}, start),
		aborted:  make(map[txn.GID]uint64),
		frags:    termination.NewFragments(window),
		settled:  start,
	}, nil
}

// Settled returns the last seqno stepped: dbsm decides every entry at its
// delivery.
func (d *Decider) Settled() uint64 { return d.settled }

// Step decides the entry delivered at e.Seqno.
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
		d.cert.Skip(e.Seqno)
		if _, ok := d.aborted[e.GID]; !ok { // after its abort, nothing will use it
			d.frags.Add(e.Seqno, e.GID, e.Index)
			st.Hold = true
		}
	case termination.KindAbort:
		d.aborted[e.GID] = e.Seqno
		d.frags.Forget(e.GID)
		d.cert.Skip(e.Seqno)
		st.Decisions = []termination.Decision{{GID: e.GID, Origin: e.GID.Node(), Reason: "aborted by its origin", Cause: termination.CauseOriginAbort}}
	case termination.KindTxn:
		dec, err := d.certify(e)
		if err != nil {
			return termination.Step{}, err
		}
		st.Decisions = []termination.Decision{dec}
	default:
		d.cert.Skip(e.Seqno)
	}
	d.settled = e.Seqno
	return st, nil
}

// expireAborts forgets the aborts of gids whose TxnEntry never came within
// a certification window: should it come now, its snapshot (taken before
// the abort was proposed) is too old anyway, so the decision is the same.
func (d *Decider) expireAborts(seqno uint64) {
	for gid, at := range d.aborted {
		if seqno-at > d.window {
			delete(d.aborted, gid)
		}
	}
}

// certify decides a delivered TxnEntry.
func (d *Decider) certify(e *termination.Entry) (termination.Decision, error) {
	if e.Protocol != d.protocol {
		return termination.Decision{}, fmt.Errorf("dbsm: entry %d (%s) was proposed under protocol %q, this node runs %q", e.Seqno, e.GID, e.Protocol, d.protocol)
	}
	out := termination.Decision{GID: e.GID, Origin: e.Origin, Seqno: e.Seqno}
	if e.Fragments > 0 {
		defer d.frags.Forget(e.GID)
	}
	switch e.Replayed {
	case termination.ReplayCommit:
		delete(d.aborted, e.GID)
		d.cert.Record(e.Seqno, e.Keys)
		out.Commit, out.Cause = true, termination.CauseReplayed
		return out, nil
	case termination.ReplayAbort:
		delete(d.aborted, e.GID)
		d.cert.Skip(e.Seqno)
		out.Reason, out.Cause = "aborted before this node restarted", termination.CauseReplayed
		return out, nil
	}
	if _, ok := d.aborted[e.GID]; ok {
		delete(d.aborted, e.GID)
		d.cert.Skip(e.Seqno)
		out.Reason, out.Cause = "aborted by its origin", termination.CauseOriginAbort
		return out, nil
	}
	if e.Fragments > 0 && !d.frags.Complete(e.Seqno, e.GID, e.Fragments) {
		d.cert.Skip(e.Seqno)
		out.Reason, out.Cause = "its fragments were not all delivered within the certification window", termination.CauseTooOld
		return out, nil
	}
	if why := e.GranulesStale(); why != "" {
		d.cert.Skip(e.Seqno)
		out.Reason, out.Cause = why, termination.CauseGranules
		return out, nil
	}
	c := d.cert.Certify(e.Seqno, &certifier.Request{SnapshotSeqno: e.SnapshotSeqno, Keys: e.Keys, ReadAll: e.ReadAll, CheckReads: e.Serializable})
	if out.Commit = c.Commit; !c.Commit {
		out.Reason, out.Cause = c.Reason.String(), termination.CauseTooOld
		if c.Reason == certifier.ReasonConflict {
			out.Reason = fmt.Sprintf("conflict on %s with the transaction at seqno %d", c.Key, c.By)
			out.Cause, out.Conflict = termination.CauseCertification, c.Key
		}
	}
	return out, nil
}
