package totalorder

import (
	"sync"
	"time"

	"go.etcd.io/raft/v3"
)

// Leadership follows the writes. A follower's proposal travels to the
// leader before the leader can replicate it, and the leader's commit
// travels back before the follower can deliver it: two more one-way trips
// than a proposal of the leader's own, which on a wide-area link is a
// round trip added to every commit. When the writes come mostly through
// one node (an application that connects to its nearest node, a batch job
// on one of them), that node should lead. So the leader counts, per
// Config.FollowWrites window, which node proposed the entries it applied
// (their envelope's origin); when one other data voter that is up to date
// proposed at least three quarters of them, and the leader itself not
// more than a quarter, it hands leadership over (raft's TransferLeader:
// no election timeout, the target campaigns at once). After a change of
// leader, wherever it came from, nothing moves for followQuiet, so two
// nodes writing in turns cannot toss leadership back and forth faster.
// Writes spread over the nodes move nothing: any leader serves them
// alike. Witnesses and learners are never chosen.

// followMinEntries: a window with fewer committed entries moves nothing.
const followMinEntries = 20

// followQuiet: how long after a change of leader nothing moves (a
// variable for tests).
var followQuiet = 10 * time.Second

// writeShare counts the entries applied per origin since the window began
// (the apply goroutine adds; the raft goroutine takes).
type writeShare struct {
	mu     sync.Mutex
	counts map[uint64]uint64
	total  uint64
}

func (w *writeShare) note(origin uint64) {
	w.mu.Lock()
	if w.counts == nil {
		w.counts = map[uint64]uint64{}
	}
	w.counts[origin]++
	w.total++
	w.mu.Unlock()
}

// take returns the window's counts and starts a new window.
func (w *writeShare) take() (map[uint64]uint64, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, t := w.counts, w.total
	w.counts, w.total = nil, 0
	return c, t
}

// followWrites runs on the raft goroutine at every tick. Once per window
// it picks the node to hand leadership to, if any; then, until the next
// window, it hands it over at the first tick that node has every entry of
// the leader's log. A transfer to a node that is behind would make raft
// drop proposals until it caught up, and if it did not within an election
// timeout, the proposals forwarded meanwhile would be lost with no change
// of term to release their callers (until their ProposeTimeout).
func (n *Node) followWrites(rn *raft.RawNode) {
	now := time.Now()
	if !now.Before(n.followNext) {
		n.followNext = now.Add(n.cfg.FollowWrites)
		n.followTarget = n.followChoose(rn, now)
	}
	if n.followTarget == 0 {
		return
	}
	st := rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || st.Lead != n.followLead {
		n.followTarget = 0
		return
	}
	pr, ok := st.Progress[n.followTarget]
	if !ok || pr.Match < st.Progress[n.id].Match {
		return // not caught up yet: next tick
	}
	to := n.followTarget
	n.followTarget = 0
	n.followQuietUntil = now.Add(followQuiet)
	n.m.followTransfers.Inc()
	if n.cfg.Logger != nil {
		n.cfg.Logger.Infof("leadership follows the writes: handing leadership to node %d, which proposed most entries of the last %s", to, n.cfg.FollowWrites)
	}
	rn.TransferLeader(to)
}

// followChoose returns the node that proposed at least three quarters of
// the window's entries if this node leads and should hand leadership to
// it, else 0.
func (n *Node) followChoose(rn *raft.RawNode, now time.Time) uint64 {
	counts, total := n.writes.take()
	st := rn.Status()
	if st.Lead != n.followLead {
		n.followLead = st.Lead
		n.followQuietUntil = now.Add(followQuiet)
	}
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 || now.Before(n.followQuietUntil) || total < followMinEntries {
		return 0
	}
	var to, most uint64
	for id, c := range counts {
		if c > most {
			to, most = id, c
		}
	}
	if to == n.id || most*4 < total*3 {
		return 0
	}
	pr, ok := st.Progress[to]
	n.mu.Lock()
	witness := n.witnesses[to]
	n.mu.Unlock()
	if !ok || pr.IsLearner || witness || !pr.RecentActive {
		return 0
	}
	return to
}
