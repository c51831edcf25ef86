package termination

import (
	"slices"

	"github.com/ordo-db/ordo/internal/txn"
)

// Fragments is the rule, shared by every decider, for transactions too
// large for one entry: a TxnEntry that follows n fragments may commit only
// if fragments 0..n-1 were all delivered, in order, the first no more than
// a certification window before the TxnEntry. It depends only on the
// delivered sequence.
//
// A restarted node takes the outcomes up to its proven prefix from its
// proof rows; after it, it has replayed every fragment a TxnEntry that
// can still commit needs: one whose first fragment is older than where the
// replay started is more than a window old and aborts on every node.
type Fragments struct {
	window uint64
	runs   map[txn.GID]*fragmentRun
}

type fragmentRun struct {
	first  uint64 // seqno of the first fragment delivered
	n      uint32 // fragments delivered
	broken bool   // one was missing or out of order
}

// NewFragments returns an empty Fragments for a certification window.
func NewFragments(window uint64) *Fragments {
	return &Fragments{window: window, runs: make(map[txn.GID]*fragmentRun)}
}

// Add records fragment index of gid delivered at seqno.
func (f *Fragments) Add(seqno uint64, gid txn.GID, index uint32) {
	r := f.runs[gid]
	if r == nil {
		r = &fragmentRun{first: seqno}
		f.runs[gid] = r
	}
	if index != r.n {
		r.broken = true
	}
	r.n++
}

// Complete reports whether the TxnEntry of gid delivered at seqno has its
// n fragments, in order and within the window.
func (f *Fragments) Complete(seqno uint64, gid txn.GID, n uint32) bool {
	r := f.runs[gid]
	return r != nil && !r.broken && r.n == n && seqno-r.first <= f.window
}

// Forget forgets gid's fragments.
func (f *Fragments) Forget(gid txn.GID) { delete(f.runs, gid) }

// Len returns the number of transactions with fragments.
func (f *Fragments) Len() int { return len(f.runs) }

// Expire forgets and returns the transactions whose TxnEntry could no
// longer commit if delivered at seqno or later: their origin gave up or
// died before proposing it.
func (f *Fragments) Expire(seqno uint64) []txn.GID {
	var out []txn.GID
	for gid, r := range f.runs {
		if seqno-r.first > f.window {
			out = append(out, gid)
			delete(f.runs, gid)
		}
	}
	slices.Sort(out) // deterministic, whatever the map's order
	return out
}
