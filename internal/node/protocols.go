package node

import (
	"go.etcd.io/raft/v3"

	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/pkg/config"
)

// suspects returns the failure detection pgr's and cons' engine asks
// which origins are gone (replica.Config.Suspects): on the Raft leader, the members that
// did not answer it within the last election timeout (raft's CheckQuorum
// bookkeeping, Progress.RecentActive); elsewhere nobody. nil under the
// protocols that need none.
func (n *Node) suspects(_ *config.Node) func() []uint32 {
	return func() []uint32 {
		st := n.order.Status()
		if st.RaftState != raft.StateLeader {
			return nil
		}
		var out []uint32
		for id, pr := range st.Progress {
			if id != st.ID && !pr.RecentActive && !pr.IsLearner {
				out = append(out, uint32(id))
			}
		}
		return out
	}
}

// consClasses gives sessions the conflict classes in force (they take
// classes only while the cluster runs cons).
func consClasses(_ *config.Node, rep *replica.Replica) func() classes.Set {
	return rep.ClassSet
}
