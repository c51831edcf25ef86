package totalorder

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"

	"github.com/ordo-db/ordo/internal/totalorder/storage"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// Config configures a Node. ID, Dir, Transport and (unless the directory
// already holds state or Join is set) Peers are required.
type Config struct {
	// ID is this node's Raft id, non-zero and never reused after removal.
	ID uint64
	// Dir holds the node's log and snapshots.
	Dir string
	// Peers maps member ids to their transport addresses. On first start
	// (empty Dir, Join false) it is the initial membership and must contain
	// ID. Otherwise it only tells the transport where the current members
	// are; members added later are found through their conf change.
	Peers map[uint64]string
	// Join starts a node with an empty Dir as a new member that an existing
	// group has added with AddNode; it waits to be contacted by the leader.
	Join bool
	// Witnesses are the bootstrap members that are witnesses (a voter
	// that carries out no entry: see witness.go); the same on every node.
	// Members added later say so in their configuration change.
	Witnesses map[uint64]bool
	// Witness: this node is a witness. It hands leadership to another
	// voter whenever it is elected.
	Witness bool
	// FollowWrites, if non-zero, is the window over which a leader counts
	// which node proposed the entries committed: when one other data voter
	// proposed at least three quarters of them (and at least
	// followMinEntries), leadership moves to it (follow.go). 0: leadership
	// stays where elections put it.
	FollowWrites time.Duration
	// SeededJoins: every member added to the group starts with Seed (its
	// log starts where it needs it), so no snapshot is taken for it. That
	// snapshot, ahead of the compaction point, would be where this node's
	// log starts after a restart (the storage keeps no entry below its
	// newest snapshot): a consumer restarted within a certification
	// window of it would find the entries it replays gone.
	SeededJoins bool
	// Seed, with Join and an empty Dir, starts the log at a point of the
	// group's log (from a member's LogPointAt) instead of at its
	// beginning: the node holds no entry up to Seed.Index and is caught
	// up from the entry after it, so a node that joins by state transfer
	// at S replays the window before S from the log even where the group
	// compacted the entries before Seed.Index away (a snapshot from the
	// leader would skip them).
	Seed *LogPoint
	// Transport carries Raft messages; the Node starts and stops it.
	Transport transport.Transport
	// StartAfter is the applied prefix the consumer's database proves: the
	// Node delivers exactly the entries with seqno > StartAfter, each once.
	StartAfter uint64

	// TickInterval is the Raft logical clock tick. Default 100ms.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks are in ticks. Defaults 10 and 1.
	ElectionTicks, HeartbeatTicks int
	// ProposeTimeout bounds Propose, ReadIndex, AddNode and RemoveNode; on
	// expiry they return ErrNoQuorum. Default 5s.
	ProposeTimeout time.Duration
	// MaxInflight bounds the proposals of this node that are waiting to
	// commit; further Propose calls wait (on their ctx). Default 4096.
	MaxInflight int
	// MaxProposalBytes bounds a payload. Default 16 MiB.
	MaxProposalBytes int
	// DeliveryBuffer is the capacity of the delivery channel. Default 4096.
	DeliveryBuffer int
	// SnapshotEntries: a snapshot is taken and the log compacted once every
	// member has reported an applied index at least this many entries past
	// the last snapshot. Default 10000.
	SnapshotEntries uint64
	// RetainEntries, if non-zero, bounds how far a member that does not
	// keep up (down, partitioned, or a learner still copying) holds back
	// compaction: once this node's own durably applied index is more than
	// RetainEntries past a member's reported one, the log is compacted
	// past that member, which then can only catch up by a snapshot (a
	// state transfer). 0: a member holds compaction back for as long as it
	// lags.
	RetainEntries uint64
	// RetainBytes, if non-zero, bounds the same in bytes of entries: once
	// the entries after a member's reported index hold more than
	// RetainBytes, the log is compacted past it (whichever of the two
	// limits is reached first). It also makes the log compact once the
	// entries since the last compaction hold RetainBytes/2, however few.
	RetainBytes uint64
	// KeepEntries: a compaction leaves at least this many entries in the
	// log behind the index every member applied (or RetainEntries
	// allows), so a node that rejoins by state transfer at such an index
	// S still finds the entries before S its consumer must replay (the
	// certification window). 0: none kept.
	KeepEntries uint64
	// SnapshotData, if set, supplies the consumer's part of a snapshot at
	// seqno (called on the apply goroutine, which it stalls: keep it quick). A node that receives
	// a snapshot gets it back in a DeliverySnapshot.
	SnapshotData func(seqno uint64) ([]byte, error)
	// DeliverMembership adds DeliveryMembers to the delivery stream.
	DeliverMembership bool
	// Storage tunes the on-disk log.
	Storage storage.Options
	// Registerer receives the node's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger is raft's logger; nil discards raft's log.
	Logger raft.Logger
}

func (c *Config) setDefaults() error {
	if c.ID == 0 {
		return errors.New("totalorder: config: ID must be non-zero")
	}
	if c.Dir == "" {
		return errors.New("totalorder: config: Dir is required")
	}
	if c.Transport == nil {
		return errors.New("totalorder: config: Transport is required")
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.HeartbeatTicks >= c.ElectionTicks {
		return fmt.Errorf("totalorder: config: HeartbeatTicks (%d) must be below ElectionTicks (%d)", c.HeartbeatTicks, c.ElectionTicks)
	}
	if c.ProposeTimeout <= 0 {
		c.ProposeTimeout = 5 * time.Second
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 4096
	}
	if c.MaxProposalBytes <= 0 {
		c.MaxProposalBytes = 16 << 20
	}
	if c.DeliveryBuffer <= 0 {
		c.DeliveryBuffer = 4096
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	return nil
}
