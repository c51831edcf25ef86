package totalorder

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// The agreed membership outlives the log. Config.Peers is only the
// bootstrap set: members added later are known from their conf change,
// and a compacted log no longer holds it. So every applied conf change
// (and a removal learnt from a peer) rewrites members.json in Dir: the
// address of every member that ever had one, and the ids removed. Start
// reads it back (its addresses win over Config.Peers), refuses to run a
// node whose own id is in the removed set, and its transport refuses
// removed ids even after the conf changes that removed them were
// compacted away.

const membersFile = "members.json"

type membersState struct {
	Addrs     map[uint64]string `json:"addrs"`
	Removed   []uint64          `json:"removed"`
	Witnesses []uint64          `json:"witnesses,omitempty"`
	// Bootstrap: the ids this node's log was bootstrapped with.
	Bootstrap []uint64 `json:"bootstrap,omitempty"`
}

// loadMembers merges members.json into n.addrs and n.removed. It runs in
// Start, before the node's goroutines.
func (n *Node) loadMembers() error {
	b, err := os.ReadFile(filepath.Join(n.cfg.Dir, membersFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("totalorder: %w", err)
	}
	var ms membersState
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("totalorder: %s: %w", membersFile, err)
	}
	for id, a := range ms.Addrs {
		n.addrs[id] = a
	}
	for _, id := range ms.Removed {
		n.removed[id] = true
	}
	for _, id := range ms.Witnesses {
		n.witnesses[id] = true
	}
	if len(ms.Bootstrap) > 0 {
		n.bootstrap = ms.Bootstrap
	}
	if n.removed[n.id] {
		return fmt.Errorf("%w: node %d was removed from the cluster and never rejoins with its old identity: "+
			"wipe its data directory and PostgreSQL database and join it as a new node with a new id", ErrRemoved, n.id)
	}
	return nil
}

// saveMembers writes members.json (write, fsync, rename, fsync the
// directory). Callers hold no lock; the apply goroutine and the transport
// (Removed) may call it at once, saveMu orders them.
func (n *Node) saveMembers() error {
	n.saveMu.Lock()
	defer n.saveMu.Unlock()
	n.mu.Lock()
	ms := membersState{Addrs: make(map[uint64]string, len(n.addrs))}
	for id, a := range n.addrs {
		ms.Addrs[id] = a
	}
	for id := range n.removed {
		ms.Removed = append(ms.Removed, id)
	}
	for id := range n.witnesses {
		ms.Witnesses = append(ms.Witnesses, id)
	}
	ms.Bootstrap = n.bootstrap
	n.mu.Unlock()
	sort.Slice(ms.Removed, func(i, j int) bool { return ms.Removed[i] < ms.Removed[j] })
	sort.Slice(ms.Witnesses, func(i, j int) bool { return ms.Witnesses[i] < ms.Witnesses[j] })
	b, err := json.Marshal(ms)
	if err != nil {
		return err
	}
	path := filepath.Join(n.cfg.Dir, membersFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("totalorder: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("totalorder: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("totalorder: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("totalorder: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("totalorder: %w", err)
	}
	d, err := os.Open(n.cfg.Dir)
	if err != nil {
		return fmt.Errorf("totalorder: %w", err)
	}
	defer d.Close()
	return d.Sync()
}

// MemberInfo is one member of the group as this node last applied it.
type MemberInfo struct {
	ID uint64
	// Learner: receives the log, does not vote (a joining node).
	Learner bool
	// Addr is the member's peer address, "" if this node never learnt it.
	Addr string
	// Witness: a voter without a database (witness.go).
	Witness bool
}

// MemberInfos returns the current members (voters and learners) by id.
func (n *Node) MemberInfos() []MemberInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]MemberInfo, 0, len(n.members))
	for id := range n.members {
		out = append(out, MemberInfo{ID: id, Learner: n.learners[id], Addr: n.addrs[id], Witness: n.witnesses[id]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
