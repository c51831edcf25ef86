package totalorder

import (
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
