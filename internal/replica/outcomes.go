package replica

import (
	"slices"
	"time"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Outcome entries (pgr). A pgr transaction is decided by the first
// outcome delivered for it:
//
//   - its origin's: the decider certifies the origin's own transaction
//     once every earlier one is decided, with the read keys only the
//     origin knows (Replica.local, handed to the decider as
//     termination.Entry.Local), and returns a Proposal, which the loop
//     proposes here; an origin that restarted since it proposed the
//     transaction no longer knows them, and proposes its abort;
//   - or an abort from whichever node sees that the origin is gone: the
//     Raft leader's failure detection (Config.Suspects: members that
//     stopped answering it) names the origin for longer than
//     suspectGrace, and the transaction is still undecided here. A live
//     origin's outcome never waits for a timer; an origin taken for gone
//     by mistake loses its transaction (an abort, which its client is
//     told), never the cluster's agreement.
//
// The loop checks for gone origins every suspectEvery, between batches.

const (
	suspectEvery = 250 * time.Millisecond
	suspectGrace = time.Second
)

// writeKeysOnly returns t with its read keys left out (the entry of a pgr
// transaction carries only what the other nodes need: its write keys).
func writeKeysOnly(t *Txn) *Txn {
	c := *t
	c.ReadAll = false
	c.Keys = nil
	for _, k := range t.Keys {
		if k.Mode &^= txn.S; k.Mode != 0 {
			c.Keys = append(c.Keys, k)
		}
	}
	return &c
}

// localOf returns what this node knows of its own transaction gid beyond
// its entry (nil if it does not: it restarted since it proposed it).
func (r *Replica) localOf(gid txn.GID) *termination.Local {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.local[gid]
}

// forgetLocal forgets what this node knows of gid, decided or never
// proposed.
func (r *Replica) forgetLocal(gid txn.GID) {
	r.mu.Lock()
	delete(r.local, gid)
	r.mu.Unlock()
}

// proposeOutcome puts a decider's proposal in the order, retrying in the
// background; whether it wins is the sequence's business.
func (r *Replica) proposeOutcome(p termination.Proposal) {
	o := &ordov1.OutcomeEntry{
		Gid: string(p.GID), TxnSeqno: p.TxnSeqno, Commit: p.Commit, Reason: p.Reason, Cause: string(p.Cause), By: r.cfg.NodeID,
	}
	if k := p.Conflict; k.Level != 0 {
		o.Conflict = &ordov1.Key{Level: uint32(k.Level), Schema: k.Schema, Table: k.Table, Column: k.Column, Value: k.Value}
	}
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Outcome{Outcome: o}})
	if err != nil {
		r.log.Error("encode outcome", "gid", p.GID, "err", err)
		return
	}
	r.proposeInBackground(payload, untilTaken, "the outcome of "+string(p.GID), func(err error) {
		r.log.Error("could not propose the outcome of a transaction; the cluster decides it once its origin is taken for gone", "gid", p.GID, "err", err)
	})
}

// abortGone proposes the abort of every undecided transaction whose origin
// the failure detection has named for longer than suspectGrace (delivery
// loop, every suspectEvery).
func (r *Replica) abortGone(now time.Time) {
	if r.cfg.Suspects == nil {
		return
	}
	named := map[uint32]bool{}
	for _, id := range r.cfg.Suspects() {
		if id == r.cfg.NodeID {
			continue
		}
		named[id] = true
		if _, ok := r.suspects[id]; !ok {
			r.suspects[id] = now
		}
	}
	for id := range r.suspects {
		if !named[id] {
			delete(r.suspects, id)
		}
	}
	if len(r.suspects) == 0 {
		return
	}
	r.abortGoneBegun(now)
	seqnos := make([]uint64, 0, len(r.pending))
	for s := range r.pending {
		seqnos = append(seqnos, s)
	}
	slices.Sort(seqnos)
	for _, s := range seqnos {
		e := r.pending[s]
		gid := txn.GID(e.Gid)
		since, gone := r.suspects[e.Origin]
		if !gone || now.Sub(since) < suspectGrace || r.goneAborts[gid] {
			continue
		}
		r.goneAborts[gid] = true
		r.log.Warn("the origin of an undecided transaction is gone: its abort is proposed", "gid", gid, "seqno", s, "origin", e.Origin)
		r.proposeOutcome(termination.Proposal{GID: gid, TxnSeqno: s, Reason: "its origin failed before it decided it", Cause: termination.CauseOriginGone})
	}
}
