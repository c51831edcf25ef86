package termination

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

// SetMembers changes how many voting members the tally counts, from the
// next verdict on. Callers change it at the same position of the order on
// every node (the voters as the log says at that seqno), so the verdicts
// stay the same everywhere.
func (v *Votes) SetMembers(members int) { v.members = max(members, 1) }

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
	majority := v.members/2 + 1
	switch {
	case len(p.ok) >= majority:
		p.verdict = Applied
	case len(p.bad) >= majority:
		p.verdict = Skipped
	case len(p.ok)+len(p.bad) >= v.members && len(p.ok) == len(p.bad):
		p.verdict = Applied
		if p.bad[p.origin] {
			p.verdict = Skipped
		}
	}
	return p.verdict
}

// Verdict returns the verdict on the entry at seqno.
func (v *Votes) Verdict(seqno uint64) Verdict {
	if p := v.polls[seqno]; p != nil {
		return p.verdict
	}
	return Undecided
}

// Voted reports whether node has voted on the entry at seqno.
func (v *Votes) Voted(seqno uint64, node uint32) bool {
	p := v.polls[seqno]
	return p != nil && (p.ok[node] || p.bad[node])
}
