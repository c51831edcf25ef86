package totalorder

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/ordo-db/ordo/internal/totalorder/storage"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// nullTransport is a Transport that sends nothing: the fuzzer plays the
// other members.
type nullTransport struct{}

func (nullTransport) Start(transport.Handler) error { return nil }
func (nullTransport) Send([]raftpb.Message)         {}
func (nullTransport) AddPeer(uint64, string)        {}
func (nullTransport) RemovePeer(uint64)             {}
func (nullTransport) SetApplied(uint64)             {}
func (nullTransport) Stop()                         {}

// peerMessages splits fuzz input into Raft messages: each is a uvarint
// length and that many bytes of a marshalled raftpb.Message, received
// from node 2 or 3 (the low bit of the length picks which).
func peerMessages(data []byte) []raftpb.Message {
	var out []raftpb.Message
	for len(data) > 0 && len(out) < 64 {
		n, k := binary.Uvarint(data)
		if k <= 0 {
			break
		}
		data = data[k:]
		from := 2 + n&1
		n >>= 1
		if n > uint64(len(data)) {
			n = uint64(len(data))
		}
		var m raftpb.Message
		if m.Unmarshal(data[:n]) == nil {
			// What the transport guarantees of a stream bound to a
			// certificate: the sender is the batch's, the target this
			// node.
			m.From, m.To = from, 1
			out = append(out, m)
		}
		data = data[n:]
	}
	return out
}

// encodePeerMessages is peerMessages' inverse (from node 2), for seeds.
func encodePeerMessages(ms ...raftpb.Message) []byte {
	var out []byte
	for _, m := range ms {
		b, err := m.Marshal()
		if err != nil {
			panic(err)
		}
		out = binary.AppendUvarint(out, uint64(len(b))<<1)
		out = append(out, b...)
	}
	return out
}

// peerSeeds are the seeds of FuzzPeerMessages; the first ones crashed a
// node before the checks of check.go and transport.CheckMessage (raft
// panicked on its goroutine, ending the process). testdata/fuzz holds them
// too, as the fuzzer found them.
func peerSeeds() [][]byte {
	env := func(origin uint64, payload string) []byte {
		b := encodeEnvelope(origin, 1, []byte(payload))
		setEnvelopeTerm(b, 2)
		return b
	}
	return [][]byte{
		// A message type raft does not know: raft indexes a table by
		// type (a negative one panicked).
		encodePeerMessages(raftpb.Message{Type: 99, Term: 2}),
		encodePeerMessages(raftpb.Message{Type: -3, Term: 2}),
		// A vote request without a term: raft answers without one, which
		// its send refuses with a panic.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgPreVote}),
		// A heartbeat committing past the end of the log.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 5, Commit: 1000}),
		// Entries out of sequence: taken for a conflict with committed ones.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgApp, Term: 5, LogTerm: 1, Index: 3, Commit: 3,
			Entries: []raftpb.Entry{{Index: 1, Term: 5}}}),
		// An entry no node could apply.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgApp, Term: 5, LogTerm: 1, Index: 3, Commit: 4,
			Entries: []raftpb.Entry{{Index: 4, Term: 5, Data: []byte("not an envelope")}}}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgApp, Term: 5, LogTerm: 1, Index: 3, Commit: 4,
			Entries: []raftpb.Entry{{Index: 4, Term: 5, Type: raftpb.EntryConfChange, Data: []byte{0xff}}}}),
		// A snapshot whose configuration raft cannot restore, or restores
		// to another one.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgSnap, Term: 3, Snapshot: &raftpb.Snapshot{
			Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1}, Learners: []uint64{1}}}}}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgSnap, Term: 3, Snapshot: &raftpb.Snapshot{
			Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 1, 2}}}}}),
		// An election forced by MsgTimeoutNow, node 2's vote, then
		// acknowledgements of entries this node never had.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgTimeoutNow, Term: 1},
			raftpb.Message{Type: raftpb.MsgVoteResp, Term: 2},
			raftpb.Message{Type: raftpb.MsgAppResp, Term: 2, Index: 1 << 40},
			raftpb.Message{Type: raftpb.MsgHeartbeatResp, Term: 2},
			raftpb.Message{Type: raftpb.MsgAppResp, Term: 2, Index: 1 << 40, Reject: true, RejectHint: 1 << 41, LogTerm: 7},
			raftpb.Message{Type: raftpb.MsgProp, Entries: []raftpb.Entry{{Data: env(2, "p")}}},
			raftpb.Message{Type: raftpb.MsgReadIndex, Entries: []raftpb.Entry{{Data: []byte("ctx")}}}),
		// Well-formed: a leader of term 2 appends and commits an entry.
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgApp, Term: 2, LogTerm: 1, Index: 3, Commit: 4,
			Entries: []raftpb.Entry{{Index: 4, Term: 2, Data: env(2, "payload")}}},
			raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 2, Commit: 4}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgProp, Entries: []raftpb.Entry{{Data: env(2, "p")}}}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgPreVote, Term: 3, LogTerm: 1, Index: 3}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgVote, Term: 3, LogTerm: 1, Index: 3}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgSnap, Term: 3, Snapshot: &raftpb.Snapshot{
			Metadata: raftpb.SnapshotMetadata{Index: 10, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgTimeoutNow, Term: 2}),
		encodePeerMessages(raftpb.Message{Type: raftpb.MsgReadIndex, Entries: []raftpb.Entry{{Data: []byte("ctx")}}}),
	}
}

// FuzzPeerMessages steps arbitrary Raft messages from the other members
// into a running node of a three-node group, through the checks a stream
// applies (transport.CheckMessage, then Node.Process). Invariants: the
// node never panics (raft runs on the node's own goroutines: a panic ends
// the fuzzing process), and it still answers on its raft goroutine.
func FuzzPeerMessages(f *testing.F) {
	for _, s := range peerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms := peerMessages(data)
		if len(ms) == 0 {
			return
		}
		n, err := Start(Config{
			ID: 1, Dir: t.TempDir(), Peers: map[uint64]string{1: "n1", 2: "n2", 3: "n3"},
			Transport: nullTransport{}, TickInterval: time.Hour, // no elections of its own
			Storage: storage.Options{NoSync: true, SegmentBytes: 1 << 20},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, m := range ms {
			if transport.CheckMessage(&m) != nil {
				continue
			}
			_ = n.Process(ctx, m)
		}
		// A round trip through the raft goroutine: it took every message
		// and handled the Ready they made.
		for range 2 {
			if err := n.ctrl(ctx, func(rn *raft.RawNode) { _ = rn.Status() }); err != nil && n.Err() == nil {
				t.Fatalf("raft goroutine: %v", err)
			}
		}
	})
}
