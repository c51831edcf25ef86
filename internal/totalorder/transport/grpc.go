package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// GRPCConfig configures a GRPC transport.
type GRPCConfig struct {
	// ID is the local node's Raft id.
	ID uint64
	// Listener is where the Raft service is served; the transport owns it
	// from Start on and closes it on Stop.
	Listener net.Listener
	// ServerTLS, when set, serves TLS; set ClientCAs and
	// ClientAuth=RequireAndVerifyClientCert for mutual TLS (or verify the
	// client's chain in VerifyConnection).
	ServerTLS *tls.Config
	// ClientTLS, when set, dials peers with TLS (with Certificates for
	// mutual TLS).
	ClientTLS *tls.Config
	// PeerID, set with mutual TLS, reads the node id a peer's verified
	// certificate proves, and binds every connection to it: an inbound
	// stream may carry only batches and messages from that id (anything
	// else is refused and logged, and the stream closed), a handshake whose
	// certificate proves no id is refused, and a connection to peer N is
	// made only if the certificate the peer presents proves N.
	PeerID func(*x509.Certificate) (uint64, error)
	// Logger receives refused connections and streams (default
	// slog.Default()).
	Logger *slog.Logger
	// QueueSize bounds the messages queued per peer; when full, new
	// messages to that peer are dropped and reported unreachable. Default
	// 8192.
	QueueSize int
	// MaxBatch bounds the messages sent in one RaftBatch. Default 512.
	MaxBatch int
	// IdleApplied is how often an idle stream still reports the applied
	// index. Default 100ms.
	IdleApplied time.Duration
	// MaxMsgBytes bounds a RaftBatch (snapshots travel in one). Default
	// 256 MiB.
	MaxMsgBytes int
}

// GRPC is a Transport over gRPC: one long-lived client stream per peer
// direction, carrying batches of marshalled raftpb.Messages.
//
// Goroutines: one serving goroutine (grpc.Server.Serve) plus gRPC's own per
// stream; one sender per peer, which owns that peer's connection and stream.
type GRPC struct {
	ordov1.UnimplementedRaftServer

	cfg     GRPCConfig
	h       Handler
	srv     *grpc.Server
	applied atomic.Uint64

	mu      sync.Mutex
	peers   map[uint64]*peer
	stopped bool

	refusals struct {
		sync.Mutex
		last map[string]time.Time // when each kind of refusal was last logged
	}

	wg    sync.WaitGroup
	stopc chan struct{}
}

var _ Transport = (*GRPC)(nil)

// NewGRPC returns a transport; it serves nothing until Start.
func NewGRPC(cfg GRPCConfig) (*GRPC, error) {
	if cfg.ID == 0 {
		return nil, errors.New("transport: ID must be non-zero")
	}
	if cfg.Listener == nil {
		return nil, errors.New("transport: Listener is required")
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 8192
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 512
	}
	if cfg.IdleApplied <= 0 {
		cfg.IdleApplied = 100 * time.Millisecond
	}
	if cfg.MaxMsgBytes <= 0 {
		cfg.MaxMsgBytes = 256 << 20
	}
	if cfg.PeerID != nil && (cfg.ServerTLS == nil || cfg.ClientTLS == nil) {
		return nil, errors.New("transport: PeerID needs ServerTLS and ClientTLS")
	}
	if cfg.ServerTLS != nil && cfg.PeerID != nil && cfg.ServerTLS.ClientAuth != tls.RequireAnyClientCert && cfg.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, errors.New("transport: PeerID needs ServerTLS to require client certificates")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t := &GRPC{cfg: cfg, peers: map[uint64]*peer{}, stopc: make(chan struct{})}
	t.refusals.last = map[string]time.Time{}
	return t, nil
}

// Addr is the address the transport serves on.
func (t *GRPC) Addr() string { return t.cfg.Listener.Addr().String() }

// windowSize and connWindowSize are HTTP/2's flow-control windows of a
// stream and of a connection between two nodes. Set, they turn off
// gRPC's estimate of the link's bandwidth-delay product, which pings the
// peer on every message that arrives after the last ping's answer: for
// Raft's small messages, one at a time, that was a ping and its answer
// per message each way, about as many system calls as the messages
// themselves (BenchmarkRoundTrip). 8 MiB is gRPC's own largest window
// for a stream; a link of 50 ms round trips still carries 160 MB/s.
const (
	windowSize     = 8 << 20
	connWindowSize = 16 << 20
)

// Start serves the Raft service and delivers to h.
func (t *GRPC) Start(h Handler) error {
	t.h = h
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(t.cfg.MaxMsgBytes),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(connWindowSize)}
	if t.cfg.ServerTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(t.serverTLS())))
	}
	t.srv = grpc.NewServer(opts...)
	ordov1.RegisterRaftServer(t.srv, t)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		_ = t.srv.Serve(t.cfg.Listener) // returns when Stop is called
	}()
	return nil
}

// Stream receives one peer's batches (the server side of a peer's sender).
// With PeerID, the stream is bound to the node id the connection's
// certificate proves: a batch from another node, or a message whose From
// is not the batch's, ends the stream with PermissionDenied before any of
// that batch is stepped.
func (t *GRPC) Stream(s grpc.ClientStreamingServer[ordov1.RaftBatch, ordov1.RaftStreamClose]) error {
	ctx := s.Context()
	remote := "unknown"
	var proven uint64 // 0: not bound (no PeerID)
	if p, ok := grpcpeer.FromContext(ctx); ok {
		remote = p.Addr.String()
		if t.cfg.PeerID != nil {
			id, err := t.provenID(p)
			if err != nil {
				t.refuse("stream "+err.Error(), "refused a peer stream", "remote", remote, "err", err)
				return status.Errorf(codes.Unauthenticated, "%v", err)
			}
			proven = id
		}
	} else if t.cfg.PeerID != nil {
		return status.Error(codes.Unauthenticated, "transport: no peer information")
	}
	var msgs []raftpb.Message
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&ordov1.RaftStreamClose{})
		}
		if err != nil {
			return err
		}
		if b.To != t.cfg.ID {
			return status.Errorf(codes.InvalidArgument, "batch for node %x reached node %x", b.To, t.cfg.ID)
		}
		if err := checkSender(b.From, t.cfg.ID); err != nil {
			t.refuse(fmt.Sprintf("sender %d", b.From), "refused a peer stream: a batch from an impossible sender", "remote", remote, "err", err)
			return status.Errorf(codes.InvalidArgument, "%v", err)
		}
		if proven != 0 && b.From != proven {
			t.refuse(fmt.Sprintf("as %d %d", proven, b.From), "refused a peer stream: its certificate proves another node than the batch claims",
				"remote", remote, "certificate_node", proven, "claimed_node", b.From)
			return status.Errorf(codes.PermissionDenied, "%v: the certificate is node %d's, the batch claims node %d", ErrPeerIdentity, proven, b.From)
		}
		if t.h.IsRemoved(b.From) {
			return status.Errorf(codes.FailedPrecondition, "node %x has been removed from the group", b.From)
		}
		if mv, ok := t.h.(MembershipViewer); ok && (len(b.Members) > 0 || len(b.Witnesses) > 0 || len(b.Bootstrap) > 0) {
			if err := mv.CheckMembershipView(b.From, b.Members, b.Witnesses, b.Bootstrap); err != nil {
				t.refuse(fmt.Sprintf("membership %d", b.From), "refused a peer stream: the peer's view of the group contradicts this node's", "remote", remote, "batch_from", b.From, "err", err)
				return status.Errorf(codes.PermissionDenied, "%v", err)
			}
		}
		msgs = msgs[:0]
		for _, raw := range b.Messages {
			var m raftpb.Message
			if err := m.Unmarshal(raw); err != nil {
				t.refuse("unmarshal "+remote, "refused a peer stream: a raft message does not decode", "remote", remote, "batch_from", b.From, "err", err)
				return status.Errorf(codes.InvalidArgument, "%v: %v", ErrBadMessage, err)
			}
			if err := CheckMessage(&m); err != nil {
				t.refuse(fmt.Sprintf("check %d %s", b.From, m.Type), "refused a peer stream: a malformed raft message", "remote", remote, "batch_from", b.From, "err", err)
				return status.Errorf(codes.InvalidArgument, "%v", err)
			}
			if m.From != b.From || m.To != t.cfg.ID {
				t.refuse(fmt.Sprintf("msg %d %d %d", b.From, m.From, m.To), "refused a peer stream: a message's sender or recipient is not the batch's",
					"remote", remote, "batch_from", b.From, "message_from", m.From, "message_to", m.To)
				return status.Errorf(codes.PermissionDenied, "%v: a message from node %d to node %d in a batch from node %d", ErrPeerIdentity, m.From, m.To, b.From)
			}
			msgs = append(msgs, m)
		}
		if b.Applied > 0 {
			t.h.PeerApplied(b.From, b.Applied)
		}
		for _, m := range msgs {
			if err := t.h.Process(ctx, m); err != nil {
				if errors.Is(err, ErrBadMessage) {
					t.refuse(fmt.Sprintf("process %d %s", b.From, m.Type), "refused a peer stream: the node refused a raft message", "remote", remote, "batch_from", b.From, "err", err)
					return status.Errorf(codes.InvalidArgument, "%v", err)
				}
				return status.Errorf(codes.Unavailable, "step: %v", err)
			}
		}
	}
}

// provenID is the node id the certificate of a stream's connection proves.
func (t *GRPC) provenID(p *grpcpeer.Peer) (uint64, error) {
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return 0, fmt.Errorf("%w: the connection presented no certificate", ErrPeerIdentity)
	}
	return t.cfg.PeerID(info.State.PeerCertificates[0])
}

// serverTLS is ServerTLS with, under PeerID, a check at every handshake
// that the client's certificate proves a node id; a refused handshake is
// logged with the address it came from.
func (t *GRPC) serverTLS() *tls.Config {
	base := t.cfg.ServerTLS
	if t.cfg.PeerID == nil || base.GetConfigForClient != nil {
		return base
	}
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		remote := "unknown"
		if hello.Conn != nil {
			remote = hello.Conn.RemoteAddr().String()
		}
		c := base.Clone()
		verify := c.VerifyConnection
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			err := func() error {
				if verify != nil {
					if err := verify(cs); err != nil {
						return err
					}
				}
				if len(cs.PeerCertificates) == 0 {
					return fmt.Errorf("%w: no certificate presented", ErrPeerIdentity)
				}
				_, err := t.cfg.PeerID(cs.PeerCertificates[0])
				return err
			}()
			if err != nil {
				host, _, _ := net.SplitHostPort(remote)
				t.refuse("handshake "+host+" "+err.Error(), "refused a peer connection", "remote", remote, "err", err)
			}
			return err
		}
		return c, nil
	}
	return cfg
}

// refuse logs a refusal, at most once every refusalEvery for the same key
// (a refused peer reconnects many times a second).
func (t *GRPC) refuse(key, msg string, args ...any) {
	t.refusals.Lock()
	last, seen := t.refusals.last[key]
	now := time.Now()
	if seen && now.Sub(last) < refusalEvery {
		t.refusals.Unlock()
		return
	}
	if len(t.refusals.last) > 1024 {
		clear(t.refusals.last)
	}
	t.refusals.last[key] = now
	t.refusals.Unlock()
	t.cfg.Logger.Warn(msg, append(args, "node", t.cfg.ID)...)
}

const refusalEvery = 10 * time.Second

// AddPeer implements Transport.
func (t *GRPC) AddPeer(id uint64, addr string) {
	if id == t.cfg.ID {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if p, ok := t.peers[id]; ok {
		if p.addr == addr {
			return
		}
		p.stop()
		delete(t.peers, id)
	}
	p := &peer{t: t, id: id, addr: addr, q: make(chan outMsg, t.cfg.QueueSize), stopc: make(chan struct{})}
	t.peers[id] = p
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		p.run()
	}()
}

// RemovePeer implements Transport.
func (t *GRPC) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		p.stop()
		delete(t.peers, id)
	}
}

// SetApplied implements Transport.
func (t *GRPC) SetApplied(index uint64) { t.applied.Store(index) }

// Send implements Transport.
func (t *GRPC) Send(msgs []raftpb.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		p, ok := t.peers[m.To]
		if !ok {
			t.unsent(m)
			continue
		}
		b, err := m.Marshal()
		if err != nil {
			t.h.ReportUnreachable(m.To)
			t.unsent(m)
			continue
		}
		select {
		case p.q <- outMsg{raw: b, snap: m.Type == raftpb.MsgSnap, prop: m.Type == raftpb.MsgProp}:
		default:
			t.h.ReportUnreachable(m.To)
			if m.Type == raftpb.MsgSnap {
				t.h.ReportSnapshot(m.To, true)
			}
			t.unsent(m)
		}
	}
}

// Stop implements Transport.
func (t *GRPC) Stop() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	t.stopped = true
	for id, p := range t.peers {
		p.stop()
		delete(t.peers, id)
	}
	t.mu.Unlock()
	close(t.stopc)
	if t.srv != nil {
		t.srv.Stop()
	} else {
		t.cfg.Listener.Close()
	}
	t.wg.Wait()
}

// outMsg is a message marshalled by Send (in the caller's goroutine, as the
// raft Ready contract asks) and waiting in a peer's queue.
type outMsg struct {
	raw  []byte
	snap bool
	prop bool // a MsgProp (ProposalReporter)
}

// unsent tells a ProposalReporter handler of a MsgProp that was never
// handed to the network.
func (t *GRPC) unsent(m raftpb.Message) {
	if r, ok := t.h.(ProposalReporter); ok && m.Type == raftpb.MsgProp {
		r.ReportProposalUnsent(m)
	}
}

// peer is the sending side toward one peer.
type peer struct {
	t     *GRPC
	id    uint64
	addr  string
	q     chan outMsg
	stopc chan struct{}
	once  sync.Once
}

func (p *peer) stop() { p.once.Do(func() { close(p.stopc) }) }

func (p *peer) dial() (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if p.t.cfg.ClientTLS != nil {
		creds = credentials.NewTLS(p.clientTLS())
	}
	return grpc.NewClient(p.addr,
		grpc.WithTransportCredentials(creds),
		// Reconnect quickly to a restarted peer: Raft heartbeats are tens
		// of milliseconds apart, gRPC's default backoff grows to minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(p.t.cfg.MaxMsgBytes)),
		grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(connWindowSize),
	)
}

// clientTLS is ClientTLS with, under PeerID, a check at every handshake
// that the peer's certificate proves the id this peer was added as.
func (p *peer) clientTLS() *tls.Config {
	cfg := p.t.cfg.ClientTLS.Clone()
	if p.t.cfg.PeerID == nil {
		return cfg
	}
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				p.t.refuse("dial "+p.addr, "refused the certificate of a peer dialed", "peer", p.id, "addr", p.addr, "err", err)
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: %s presented no certificate", ErrPeerIdentity, p.addr)
		}
		id, err := p.t.cfg.PeerID(cs.PeerCertificates[0])
		if err == nil && id != p.id {
			err = fmt.Errorf("%w: %s, dialed as node %d, presents the certificate of node %d", ErrPeerIdentity, p.addr, p.id, id)
		}
		if err != nil {
			p.t.refuse("dial "+p.addr, "refused the certificate of a peer dialed", "peer", p.id, "addr", p.addr, "err", err)
		}
		return err
	}
	return cfg
}

// run owns the connection and the stream to the peer until stopped.
func (p *peer) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.t.wg.Add(1)
	go func() {
		defer p.t.wg.Done()
		select {
		case <-ctx.Done():
		case <-p.stopc:
		case <-p.t.stopc:
		}
		cancel()
	}()
	conn, err := p.dial()
	if err != nil {
		// grpc.NewClient fails only on a malformed target; nothing will
		// ever reach this peer.
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-p.q:
				p.lost(m, true)
			}
		}
	}
	defer conn.Close()
	client := ordov1.NewRaftClient(conn)

	var (
		stream      grpc.ClientStreamingClient[ordov1.RaftBatch, ordov1.RaftStreamClose]
		scancel     context.CancelFunc
		lastApplied uint64
		batch       = make([]outMsg, 0, p.t.cfg.MaxBatch)
		raw         [][]byte
		idle        = time.NewTicker(p.t.cfg.IdleApplied)
	)
	defer idle.Stop()
	// A batch stays well under the message limit: a message that would
	// take it over is carried to the next batch (a single message larger
	// than that goes alone).
	limit := p.t.cfg.MaxMsgBytes / 2
	var carry *outMsg
	closeStream := func() {
		if scancel != nil {
			scancel()
		}
		stream, scancel = nil, nil
	}
	defer closeStream()
	backoff := time.Time{}
	for {
		batch = batch[:0]
		size := 0
		take := func(m outMsg) bool {
			if len(batch) > 0 && size+len(m.raw) > limit {
				carry = &m
				return false
			}
			batch = append(batch, m)
			size += len(m.raw)
			return true
		}
		drain := func() {
			for len(batch) < cap(batch) && carry == nil {
				select {
				case m := <-p.q:
					take(m)
				default:
					return
				}
			}
		}
		if carry != nil {
			m := *carry
			carry = nil
			take(m)
			drain()
		} else {
			select {
			case <-ctx.Done():
				return
			case m := <-p.q:
				take(m)
				drain()
			case <-idle.C:
				if p.t.applied.Load() == lastApplied {
					continue
				}
			}
		}
		if stream == nil {
			if time.Now().Before(backoff) {
				p.lostAll(batch, true)
				continue
			}
			sctx, c := context.WithCancel(ctx)
			s, err := client.Stream(sctx)
			if err != nil {
				c()
				backoff = time.Now().Add(50 * time.Millisecond)
				p.lostAll(batch, true)
				continue
			}
			stream, scancel = s, c
		}
		raw = raw[:0]
		for i := range batch {
			raw = append(raw, batch[i].raw)
		}
		applied := p.t.applied.Load()
		rb := &ordov1.RaftBatch{From: p.t.cfg.ID, To: p.id, Applied: applied, Messages: raw}
		if mv, ok := p.t.h.(MembershipViewer); ok {
			rb.Members, rb.Witnesses, rb.Bootstrap = mv.MembershipView()
		}
		err := stream.Send(rb)
		if err != nil {
			if err == io.EOF {
				_, err = stream.CloseAndRecv()
			}
			wait := 50 * time.Millisecond
			switch status.Code(err) {
			case codes.FailedPrecondition:
				p.t.h.Removed()
			case codes.PermissionDenied, codes.Unauthenticated:
				// a configuration error, not a passing fault: retry
				// slowly (the peer logs why; so does this side)
				p.t.refuse("refused by "+p.addr, "a peer refused this node's stream", "peer", p.id, "addr", p.addr, "err", err)
				wait = time.Second
			}
			closeStream()
			backoff = time.Now().Add(wait)
			// The stream broke under the batch: some of it, and of
			// batches sent before it, may have arrived. Not unsent.
			p.lostAll(batch, false)
			continue
		}
		lastApplied = applied
		for i := range batch {
			if batch[i].snap {
				p.t.h.ReportSnapshot(p.id, false)
			}
		}
	}
}

// lost reports a message to the peer lost; unsent: it was never handed to
// the network (the peer cannot have it).
func (p *peer) lost(m outMsg, unsent bool) {
	p.lostAll([]outMsg{m}, unsent)
}

func (p *peer) lostAll(ms []outMsg, unsent bool) {
	if len(ms) == 0 {
		return
	}
	p.t.h.ReportUnreachable(p.id)
	for _, m := range ms {
		if m.snap {
			p.t.h.ReportSnapshot(p.id, true)
		}
		if unsent && m.prop {
			var rm raftpb.Message
			if rm.Unmarshal(m.raw) == nil {
				p.t.unsent(rm)
			}
		}
	}
}

// String describes the transport for logs.
func (t *GRPC) String() string { return fmt.Sprintf("grpc transport %x on %s", t.cfg.ID, t.Addr()) }
