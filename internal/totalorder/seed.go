package totalorder

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/ordo-db/ordo/internal/totalorder/storage"
)

// A node that joins by state transfer copies a member's database at an
// applied prefix S and must then replay the entries of the certification
// window before S (its consumer rebuilds what certification remembers
// from them). If the group's log is compacted, raft would catch the new
// node up with the leader's latest snapshot, whose index may well be past
// S minus the window (a snapshot whose configuration includes the new
// node is taken when it is added): the entries in between would never
// reach it. So the donor names a point of the log, at or before the
// window's start, by index, term and configuration (LogPointAt), and the
// joiner's empty log starts there (Config.Seed), as if it had installed a
// snapshot at that index: raft's consistency check of the first append
// (the entry before it has the term the leader's log says) then lets the
// leader send the entries after it, which every member keeps (compactions
// leave Config.KeepEntries behind what every member applied).

// LogPoint names an entry of the log: its index, its term, and the
// configuration in force after it (raftpb.ConfState, marshalled).
type LogPoint struct {
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	ConfState []byte `json:"conf_state"`
}

// ErrNoLogPoint is returned by LogPointAt for an index the log does not
// hold (compacted away, or not applied yet).
var ErrNoLogPoint = errors.New("totalorder: the log does not hold that index")

// LogPointAt names entry index of this node's log, which must be applied
// here and not compacted away.
func (n *Node) LogPointAt(index uint64) (LogPoint, error) {
	if index > n.appliedIdx.Load() {
		return LogPoint{}, fmt.Errorf("%w: %d is not applied here yet", ErrNoLogPoint, index)
	}
	term, err := n.st.Raft().Term(index)
	if err != nil {
		return LogPoint{}, fmt.Errorf("%w: %d: %v", ErrNoLogPoint, index, err)
	}
	n.histMu.Lock()
	var cs *raftpb.ConfState
	for i := range n.confHist {
		if n.confHist[i].index <= index {
			cs = &n.confHist[i].cs
		}
	}
	var b []byte
	if cs != nil {
		b, err = cs.Marshal()
	}
	n.histMu.Unlock()
	if cs == nil {
		return LogPoint{}, fmt.Errorf("%w: no configuration known at %d (compacted past)", ErrNoLogPoint, index)
	}
	if err != nil {
		return LogPoint{}, err
	}
	return LogPoint{Index: index, Term: term, ConfState: b}, nil
}

// seed starts an empty log at p.
func seed(st *storage.Storage, p *LogPoint) error {
	var cs raftpb.ConfState
	if err := cs.Unmarshal(p.ConfState); err != nil {
		return fmt.Errorf("totalorder: seed: configuration: %w", err)
	}
	if p.Term == 0 {
		return fmt.Errorf("totalorder: seed: entry %d has no term", p.Index)
	}
	snap := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: p.Index, Term: p.Term, ConfState: cs}}
	hs := raftpb.HardState{Term: p.Term, Commit: p.Index}
	if err := st.Save(true, storage.Update{HardState: hs, Snapshot: &snap}); err != nil {
		return fmt.Errorf("totalorder: seed the log at %d: %w", p.Index, err)
	}
	return nil
}

// LastLogPoint names the last entry applied here.
func (n *Node) LastLogPoint() (LogPoint, error) { return n.LogPointAt(n.appliedIdx.Load()) }
