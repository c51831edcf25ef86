package transport

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// echo answers every MsgApp it is given with a MsgAppResp to its sender,
// through its own transport, and passes answers to got.
type echo struct {
	t   *GRPC
	got chan raftpb.Message
}

func (e *echo) Process(_ context.Context, m raftpb.Message) error {
	if m.Type == raftpb.MsgApp {
		e.t.Send([]raftpb.Message{{Type: raftpb.MsgAppResp, Term: m.Term, From: m.To, To: m.From, Index: m.Index}})
		return nil
	}
	e.got <- m
	return nil
}
func (e *echo) ReportUnreachable(uint64)    {}
func (e *echo) ReportSnapshot(uint64, bool) {}
func (e *echo) PeerApplied(uint64, uint64)  {}
func (e *echo) IsRemoved(uint64) bool       { return false }
func (e *echo) Removed()                    {}

// BenchmarkRoundTrip is a Raft append and its answer between two
// transports on loopback, one at a time, as a commit at one client
// makes them: time, the process's CPU, and its read and write system
// calls (/proc/self/io) per round trip.
func BenchmarkRoundTrip(b *testing.B) {
	round, stop := pingPong(b)
	defer stop()
	for i := 0; i < 100; i++ {
		round()
	}
	r0, w0 := syscalls()
	c0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round()
	}
	b.StopTimer()
	r1, w1 := syscalls()
	b.ReportMetric(float64(cpuTime()-c0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
}

// TestOneWriteAMessage: a message between two nodes costs one write(2)
// of its sender and nothing more. gRPC's bandwidth estimate, on by
// default, pinged the peer on every message that came after the last
// ping's answer, so each small message of Raft's, one at a time, also
// cost a ping and its answer (3.4 to 3.7 writes per round trip).
func TestOneWriteAMessage(t *testing.T) {
	round, stop := pingPong(t)
	defer stop()
	for i := 0; i < 20; i++ {
		round()
	}
	const n = 300
	_, w0 := syscalls()
	for i := 0; i < n; i++ {
		round()
	}
	_, w1 := syscalls()
	if per := float64(w1-w0) / n; per > 2.5 {
		t.Fatalf("%.2f writes per round trip of two messages, want 2", per)
	}
}

// pingPong starts two transports whose nodes answer each other's
// appends, and returns a function that makes one round trip.
func pingPong(tb testing.TB) (round func(), stop func()) {
	start := func(id uint64, e *echo) *GRPC {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		tr, err := NewGRPC(GRPCConfig{ID: id, Listener: l})
		if err != nil {
			tb.Fatal(err)
		}
		e.t = tr
		if err := tr.Start(e); err != nil {
			tb.Fatal(err)
		}
		return tr
	}
	e1, e2 := &echo{got: make(chan raftpb.Message, 1)}, &echo{got: make(chan raftpb.Message, 1)}
	t1, t2 := start(1, e1), start(2, e2)
	t1.AddPeer(2, t2.Addr())
	t2.AddPeer(1, t1.Addr())
	data := make([]byte, 300)
	n := 0
	round = func() {
		n++
		t1.Send([]raftpb.Message{{Type: raftpb.MsgApp, Term: 1, LogTerm: 1, From: 1, To: 2, Index: uint64(n), Entries: []raftpb.Entry{{Term: 1, Index: uint64(n + 1), Data: data}}}})
		select {
		case <-e1.got:
		case <-time.After(5 * time.Second):
			tb.Fatal("no answer")
		}
	}
	return round, func() { t2.Stop(); t1.Stop() }
}

// cpuTime is the process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// syscalls reads syscr and syscw of /proc/self/io.
func syscalls() (r, w int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			r = n
		case "syscw":
			w = n
		}
	}
	return r, w
}
