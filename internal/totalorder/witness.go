package totalorder

import (
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/raft/v3"
)

// Witnesses. A witness is a Raft voter that carries out no entry (it has
// no database): it counts for elections and for the quorum that commits
// an entry, so two data nodes and a witness keep committing when either
// data node is lost, but it takes no part in what only nodes with a
// database can do. Every node must agree on who is one at every position
// of the log, because votes on entries count only the voters that carry
// entries out (DeliveryMembers leaves witnesses out). So a member's
// configuration change says so (its context, "witness@" before the
// address: bootstrap members from Config.Witnesses, later ones from
// AddWitness), every node records it when it applies that change, before
// it counts the voters, and keeps it in members.json. An id is a witness
// for good: ids are never reused.
//
// A witness also never stays leader (the consumers' leader-only work, such
// as failure detection and scheduled data checks, runs on the leader):
// when elected, it hands leadership to the voter with the longest log.

const witnessMark = "witness@"

// peerContext is the context of a configuration change adding a member
// at addr.
func peerContext(addr string, witness bool) string {
	if witness {
		return witnessMark + addr
	}
	return addr
}

// parsePeerContext reads peerContext's result.
func parsePeerContext(ctx string) (addr string, witness bool) {
	if a, ok := strings.CutPrefix(ctx, witnessMark); ok {
		return a, true
	}
	return ctx, false
}

// IsWitness reports whether member id is a witness.
func (n *Node) IsWitness(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.witnesses[id]
}

// handOver, on a witness that leads, transfers leadership to the data
// voter whose log is longest (on the Raft goroutine).
func (n *Node) handOver(rn *raft.RawNode) {
	st := rn.Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	var to, best uint64
	n.mu.Lock()
	for id, pr := range st.Progress {
		if id == n.id || pr.IsLearner || n.witnesses[id] || !pr.RecentActive {
			continue
		}
		if to == 0 || pr.Match > best {
			to, best = id, pr.Match
		}
	}
	n.mu.Unlock()
	if to != 0 {
		rn.TransferLeader(to)
	}
}

// Every node must count the same members as witnesses, but each
// bootstrap node marks the bootstrap witnesses from its own witnesses:
// list (the bootstrap entries are written by each node itself and never
// sent). So every transport batch carries the sender's view (the members
// it knows and the ids it counts as witnesses), and a receiver that knows
// a member the other way refuses the stream (transport.WitnessViewer): a
// node whose list differs is cut off from the others, both ways, and
// says why, instead of counting other voters on entries.

// WitnessView implements transport.WitnessViewer.
func (n *Node) WitnessView() (members, witnesses []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	members = make([]uint64, 0, len(n.members)+len(n.bootPeers))
	for id := range n.members {
		members = append(members, id)
	}
	for id := range n.bootPeers {
		if !n.members[id] {
			members = append(members, id)
		}
	}
	witnesses = make([]uint64, 0, len(n.witnesses))
	for id, w := range n.witnesses {
		if w {
			witnesses = append(witnesses, id)
		}
	}
	slices.Sort(members)
	slices.Sort(witnesses)
	return members, witnesses
}

// CheckWitnessView implements transport.WitnessViewer: a member both
// nodes know must be a witness for both or for neither. (A member only
// one of them knows yet, such as one being added, is not compared.)
func (n *Node) CheckWitnessView(from uint64, members, witnesses []uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	known := func(id uint64) bool { return n.members[id] || n.bootPeers[id] }
	theirs := make(map[uint64]bool, len(witnesses))
	for _, id := range witnesses {
		theirs[id] = true
		if known(id) && !n.witnesses[id] {
			return witnessMismatch(from, id, true, n.id)
		}
	}
	for _, id := range members {
		if known(id) && n.witnesses[id] && !theirs[id] {
			return witnessMismatch(from, id, false, n.id)
		}
	}
	return nil
}

func witnessMismatch(from, id uint64, theirs bool, self uint64) error {
	what := func(w bool) string {
		if w {
			return "a witness"
		}
		return "a data node"
	}
	return fmt.Errorf("%w: node %d counts member %d as %s, node %d as %s. Every bootstrap node's witnesses: list must be the same: correct the list of the node that differs and start that node again with an empty data_dir",
		ErrWitnessMismatch, from, id, what(theirs), self, what(!theirs))
}
