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

// Every node must count the same members as witnesses and must have
// bootstrapped its log with the same voters, but each bootstrap node
// writes its first entries itself, from its own peers: and witnesses:
// lists, and never sends them. So every transport batch carries the
// sender's view (the members it knows, the ids it counts as witnesses,
// the ids it bootstrapped with), and a receiver whose view contradicts it
// refuses the stream (transport.MembershipViewer): a node whose lists
// differ is cut off from the others, both ways, and says why, instead of
// counting other voters on entries or another quorum.

// liveMembers returns the members this node counts now: its applied
// configuration's, or before it applied any, its bootstrap peers; never a
// removed id (n.mu held). Witness flags are compared on these only: a
// member removed since (a witness that left, which a node that joined
// later may still hold in its configuration while it replays) is not.
func (n *Node) liveMembers() map[uint64]bool {
	src := n.members
	if len(src) == 0 {
		src = n.bootPeers
	}
	out := make(map[uint64]bool, len(src))
	for id := range src {
		if !n.removed[id] {
			out[id] = true
		}
	}
	return out
}

// MembershipView implements transport.MembershipViewer: the live members,
// those of them that are witnesses, and the bootstrap ids.
func (n *Node) MembershipView() (members, witnesses, bootstrap []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	live := n.liveMembers()
	members = make([]uint64, 0, len(live))
	for id := range live {
		members = append(members, id)
		if n.witnesses[id] {
			witnesses = append(witnesses, id)
		}
	}
	slices.Sort(members)
	slices.Sort(witnesses)
	return members, witnesses, n.bootstrap
}

// CheckMembershipView implements transport.MembershipViewer: a member
// both nodes count now must be a witness for both or for neither (a
// member only one of them counts, such as one being added or one removed,
// is not compared), and two nodes that bootstrapped their logs must have
// done so with the same ids (a node that joined did not).
func (n *Node) CheckMembershipView(from uint64, members, witnesses, bootstrap []uint64) error {
	if len(bootstrap) > 0 && len(n.bootstrap) > 0 && !slices.Equal(bootstrap, n.bootstrap) {
		return fmt.Errorf("%w: node %d bootstrapped its log with the peers %v, node %d with %v. Every bootstrap node's peers: list must name the same ids (a node added later joins with ordo join instead): correct the list of the node that differs and start that node again with an empty data_dir",
			ErrBootstrapMismatch, from, bootstrap, n.id, n.bootstrap)
	}
	theirs := make(map[uint64]bool, len(witnesses))
	for _, id := range witnesses {
		theirs[id] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	live := n.liveMembers()
	for _, id := range members {
		if live[id] && theirs[id] != n.witnesses[id] {
			return witnessMismatch(from, id, theirs[id], n.id)
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
	return fmt.Errorf("%w: node %d counts member %d as %s, node %d as %s. Every bootstrap node's witnesses: list must be the same: correct the list of the node that differs and start that node again with an empty data_dir (if the lists are the same, the node that differs missed the member's configuration change, caught up by a snapshot: rejoin it with ordo join --rejoin)",
		ErrWitnessMismatch, from, id, what(theirs), self, what(!theirs))
}
