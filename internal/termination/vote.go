package termination

import (
	"cmp"
	"slices"
)

// Votes tally the results nodes report for entries some node could not
// carry out (DESIGN.md "When things go wrong": no poison entries). Nodes
// report only failures unprompted; a node that carried the entry out
// answers a failure with a success. The tally is a pure function of the
// delivered votes: every node reaches the same verdict.
type Votes struct {
	members int
	polls   map[uint64]*poll
}

type poll struct {
	origin  uint32
	ok, bad map[uint32]bool
	verdict Verdict
}

// Verdict is the outcome of a vote on one entry.
type Verdict uint8

// Verdicts.
const (
	Undecided Verdict = iota
	// Applied: the nodes that carried the entry out win; the others leave.
	Applied
	// Skipped: the nodes that could not carry it out win; every node that
	// stays treats the entry as not carried out, and those that carried it
	// out leave (if its origin is among them, the transaction its client
	// was told committed is lost with them).
	Skipped
)

// NewVotes tallies votes among members voting nodes.
func NewVotes(members int) *Votes {
	return &Votes{members: max(members, 1), polls: map[uint64]*poll{}}
}

// Members returns how many voting members the tally counts.
func (v *Votes) Members() int { return v.members }

// Decided is a verdict reached by a change of members.
type Decided struct {
	Seqno   uint64
	Origin  uint32
	Verdict Verdict
}

// SetMembers changes how many voting members the tally counts. Callers
// change it at the same position of the order on every node (the voters
// as the log says at that seqno), so the verdicts stay the same
// everywhere. Undecided polls are tallied again under the new count (a
// voter removed before it voted can leave the others even, or a
// majority of fewer): SetMembers returns the verdicts reached so, in
// seqno order.
func (v *Votes) SetMembers(members int) []Decided {
	v.members = max(members, 1)
	var out []Decided
	for seqno, p := range v.polls {
		if p.verdict == Undecided {
			if p.verdict = v.tally(p); p.verdict != Undecided {
				out = append(out, Decided{Seqno: seqno, Origin: p.origin, Verdict: p.verdict})
			}
		}
	}
	slices.SortFunc(out, func(a, b Decided) int { return cmp.Compare(a.Seqno, b.Seqno) })
	return out
}

// Add counts node's vote on the entry at seqno (from origin) and returns
// the verdict on it, Undecided until one side has a majority of the
// members, or every member voted and the sides are even (then the origin's
// side wins). A node's later votes on the same entry do not count, nor do
// votes after the verdict.
func (v *Votes) Add(seqno uint64, origin, node uint32, ok bool) Verdict {
	p := v.polls[seqno]
	if p == nil {
		p = &poll{origin: origin, ok: map[uint32]bool{}, bad: map[uint32]bool{}}
		v.polls[seqno] = p
	}
	if p.verdict != Undecided || p.ok[node] || p.bad[node] {
		return p.verdict
	}
	if ok {
		p.ok[node] = true
	} else {
		p.bad[node] = true
	}
	p.verdict = v.tally(p)
	return p.verdict
}

// tally is the verdict on p under the current count of members.
func (v *Votes) tally(p *poll) Verdict {
	majority := v.members/2 + 1
	switch {
	case len(p.ok) >= majority:
		return Applied
	case len(p.bad) >= majority:
		return Skipped
	case len(p.ok)+len(p.bad) >= v.members && len(p.ok) == len(p.bad):
		if p.bad[p.origin] {
			return Skipped
		}
		return Applied
	}
	return Undecided
}

// Verdict returns the verdict on the entry at seqno.
func (v *Votes) Verdict(seqno uint64) Verdict {
	if p := v.polls[seqno]; p != nil {
		return p.verdict
	}
	return Undecided
}

// Count returns how many voters carried the entry at seqno out and how
// many could not, as counted so far.
func (v *Votes) Count(seqno uint64) (ok, bad int) {
	if p := v.polls[seqno]; p != nil {
		return len(p.ok), len(p.bad)
	}
	return 0, 0
}

// Voted reports whether node has voted on the entry at seqno.
func (v *Votes) Voted(seqno uint64, node uint32) bool {
	p := v.polls[seqno]
	return p != nil && (p.ok[node] || p.bad[node])
}
