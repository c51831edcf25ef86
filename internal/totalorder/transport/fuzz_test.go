package transport

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// rawCodec sends bytes as they are: the fuzzer's bytes reach the node's
// gRPC server as the body of a RaftBatch frame, undecoded by the client.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// checkingHandler fails the test if the transport hands it a message that
// CheckMessage refuses or that is not from the batch's sender to node 1.
type checkingHandler struct {
	*handler
	fail chan string
}

func (h checkingHandler) Process(ctx context.Context, m raftpb.Message) error {
	if err := CheckMessage(&m); err != nil {
		h.fail <- fmt.Sprintf("stepped a malformed message: %v", err)
	}
	if m.To != 1 || m.From == 0 || m.From == 1 {
		h.fail <- fmt.Sprintf("stepped a message from %d to %d", m.From, m.To)
	}
	return h.handler.Process(ctx, m)
}

// FuzzStream sends arbitrary bytes as one RaftBatch on a peer stream to a
// node's Raft service, over gRPC on a real socket, as a peer would.
// Invariants: the node never panics; whatever it hands to Raft passed
// CheckMessage and comes from the batch's sender to this node; and it
// keeps serving: a well-formed batch on a new stream is delivered.
func FuzzStream(f *testing.F) {
	batch := func(from uint64, ms ...raftpb.Message) []byte {
		b := &ordov1.RaftBatch{From: from, To: 1, Applied: 3}
		for _, m := range ms {
			raw, err := m.Marshal()
			if err != nil {
				f.Fatal(err)
			}
			b.Messages = append(b.Messages, raw)
		}
		out, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		return out
	}
	hb := raftpb.Message{Type: raftpb.MsgHeartbeat, From: 2, To: 1, Term: 3, Commit: 2}
	f.Add(batch(2, hb))
	f.Add(batch(2, raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 3, LogTerm: 2, Index: 4, Commit: 4,
		Entries: []raftpb.Entry{{Index: 5, Term: 2, Data: []byte("x")}, {Index: 6, Term: 3}}}))
	f.Add(batch(2, raftpb.Message{Type: raftpb.MsgSnap, From: 2, To: 1, Term: 3,
		Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 9, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}))
	f.Add(batch(2, raftpb.Message{Type: raftpb.MsgProp, From: 2, To: 1, Entries: []raftpb.Entry{{Data: []byte("p")}}}))
	f.Add(batch(2, raftpb.Message{Type: raftpb.MsgPreVote, From: 2, To: 1, Term: 4, LogTerm: 3, Index: 9}))
	f.Add(batch(2, raftpb.Message{Type: 99, From: 2, To: 1, Term: 1}))
	f.Add(batch(2, raftpb.Message{Type: raftpb.MsgPreVote, From: 2, To: 1}))
	f.Add(batch(2, raftpb.Message{Type: raftpb.MsgStorageAppendResp, From: 2, To: 1, Term: 1}))
	f.Add(batch(raft0xFFFF, raftpb.Message{Type: raftpb.MsgHeartbeat, From: raft0xFFFF, To: 1, Term: 1}))
	f.Add(batch(3, hb))
	f.Add(batch(0))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	h := checkingHandler{handler: newHandler(), fail: make(chan string, 16)}
	tr, err := NewGRPC(GRPCConfig{ID: 1, Listener: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	if err := tr.Start(h); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(tr.Stop)
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	desc := &ordov1.Raft_ServiceDesc.Streams[0]
	method := "/" + ordov1.Raft_ServiceDesc.ServiceName + "/" + desc.StreamName
	send := func(t *testing.T, b []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := conn.NewStream(ctx, desc, method, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(&b); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		return s.RecvMsg(&ordov1.RaftStreamClose{})
	}
	good := batch(2, hb)
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = send(t, data) // refused or not: both fine
		select {
		case msg := <-h.fail:
			t.Fatal(msg)
		default:
		}
		before := h.count()
		if err := send(t, good); err != nil {
			t.Fatalf("a well-formed batch after the input: %v", err)
		}
		if h.count() != before+1 {
			t.Fatalf("a well-formed batch after the input: %d messages stepped, want 1", h.count()-before)
		}
		h.mu.Lock()
		h.got = h.got[:0] // bounded memory over a long run
		h.mu.Unlock()
	})
}

// raft0xFFFF is raft.LocalAppendThread: a sender that is raft itself.
const raft0xFFFF = ^uint64(0)
