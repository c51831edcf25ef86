package wire

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrServerClosed is returned by Serve after Shutdown has been called.
var ErrServerClosed = errors.New("wire: server closed")

// Server accepts PostgreSQL clients and relays each session to the local
// PostgreSQL server over its own backend connection.
type Server struct {
	cfg   Config
	hooks Hooks
	log   *slog.Logger
	m     *metrics

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{} // accepted connections not yet sessions
	sessions  map[*session]struct{} // established sessions
	cancelKey map[uint64]*session   // our BackendKeyData -> session
	active    int                   // sessions counted against MaxConns
	// Connections not yet authenticated, in all and by source IP
	// (MaxStartupConns, MaxStartupConnsPerSource).
	unauthed       int
	unauthedSource map[string]int
	lastRefusalLog map[string]time.Time // by limit: refusals are logged at most every 10 s
	draining       bool
	addr           net.Addr

	idleTimeouts bool // IdleTimeout or IdleInTxTimeout set
	warnedTrust  atomic.Bool

	nextID  atomic.Uint64
	nextPID atomic.Uint32
	wg      sync.WaitGroup // one per connection goroutine (and its backend goroutine)
}

// NewServer checks cfg and returns a Server. hooks may be nil: the Server is
// then a transparent proxy.
func NewServer(cfg Config, hooks Hooks) (*Server, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       c,
		hooks:     hooks,
		log:       c.Logger.With("component", "wire"),
		m:         newMetrics(c.Registerer),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
		sessions:  make(map[*session]struct{}),
		cancelKey: make(map[uint64]*session),

		unauthedSource: make(map[string]int),
		lastRefusalLog: make(map[string]time.Time),
	}
	s.idleTimeouts = c.IdleTimeout > 0 || c.IdleInTxTimeout > 0
	var b [4]byte
	_, _ = rand.Read(b[:])
	s.nextPID.Store(binary.BigEndian.Uint32(b[:])&0x3fffffff | 0x10000)
	return s, nil
}

// Addr returns the address of the listener most recently passed to Serve,
// or nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Serve accepts connections on ln until Shutdown is called (it then returns
// ErrServerClosed) or ln fails. Serve closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.addr = ln.Addr()
	s.mu.Unlock()
	s.log.Info("accepting PostgreSQL clients", "addr", ln.Addr().String(), "backend", s.cfg.BackendAddr)
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isDraining() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("wire: accept: %w", err)
		}
		backoff = 0
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.m.connsTotal.Inc()
		go s.handle(c)
	}
}

// isTemporary reports accept errors worth retrying (EMFILE and friends).
func isTemporary(err error) bool {
	type temporary interface{ Temporary() bool }
	var t temporary
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Shutdown stops accepting connections, closes sessions as soon as they are
// idle outside a transaction, and waits for the rest to finish until ctx ends
// or Config.ShutdownTimeout passes (whichever is first); then it terminates
// the remaining sessions with FATAL 57P01 and waits for their goroutines.
// It returns ctx.Err() if sessions had to be terminated because ctx ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.Close() // not yet a session: no client work to lose
	}
	sessions := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.closeIfIdle()
	}

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
	}
	for _, ss := range s.sessionsSnapshot() {
		ss.terminate(fatal(codeAdminShutdown, "terminating connection due to administrator command (ordo shutting down)"))
	}
	<-done
	return err
}

// handle runs one client connection from accept to close.
func (s *Server) handle(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in client connection", "remote", c.RemoteAddr().String(), "panic", r)
		}
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	src, admitted := s.enterStartup(c)
	if !admitted {
		return
	}
	ss, err := func() (*session, error) {
		defer s.leaveStartup(src) // even if startup panics
		return s.startup(c)
	}()
	if err != nil || ss == nil {
		if err != nil {
			s.log.Debug("client startup failed", "remote", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	ss.run()
}

// enterStartup counts a connection not yet authenticated against
// MaxStartupConns and MaxStartupConnsPerSource. Over either limit, the
// client gets FATAL 53300 at once (as PostgreSQL answers when it cannot
// start a backend: before reading anything, so also in reply to an
// SSLRequest) and ok is false. Otherwise leaveStartup(src) must follow.
func (s *Server) enterStartup(c net.Conn) (src string, ok bool) {
	src = c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(src); err == nil {
		src = host
	}
	s.mu.Lock()
	total, fromSrc := s.unauthed < s.cfg.MaxStartupConns, s.unauthedSource[src] < s.cfg.MaxStartupConnsPerSource
	reason := ""
	switch {
	case !fromSrc:
		reason = "source_limit"
	case !total:
		reason = "startup_limit"
	default:
		s.unauthed++
		s.unauthedSource[src]++
		s.m.unauthed.Inc()
	}
	logIt := false
	if now := time.Now(); reason != "" && now.Sub(s.lastRefusalLog[reason]) >= 10*time.Second {
		s.lastRefusalLog[reason], logIt = now, true
	}
	s.mu.Unlock()
	switch reason {
	case "source_limit":
		if logIt {
			s.log.Warn("refused a client: too many unauthenticated connections from its address (logged at most every 10 s)", "remote", c.RemoteAddr().String(), "limit", s.cfg.MaxStartupConnsPerSource)
		}
		s.reject(c, reason, fatal(codeTooManyConnections, "sorry, too many connections from %s not yet authenticated (ordo limit %d per address)", src, s.cfg.MaxStartupConnsPerSource))
		return src, false
	case "startup_limit":
		if logIt {
			s.log.Warn("refused a client: too many unauthenticated connections (logged at most every 10 s)", "remote", c.RemoteAddr().String(), "limit", s.cfg.MaxStartupConns)
		}
		s.reject(c, reason, fatal(codeTooManyConnections, "sorry, too many connections not yet authenticated (ordo limit %d)", s.cfg.MaxStartupConns))
		return src, false
	}
	return src, true
}

// leaveStartup ends what enterStartup counted: the connection is
// authenticated, or gone.
func (s *Server) leaveStartup(src string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unauthed--
	if s.unauthedSource[src]--; s.unauthedSource[src] <= 0 {
		delete(s.unauthedSource, src)
	}
	s.m.unauthed.Dec()
}

// admit counts a new session against MaxConns and registers it.
func (s *Server) admit(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining || s.active >= s.cfg.MaxConns {
		return false
	}
	s.active++
	delete(s.conns, ss.rawClient)
	s.sessions[ss] = struct{}{}
	s.m.connsActive.Inc()
	return true
}

// registerKey assigns ss its BackendKeyData: the process id of its
// PostgreSQL backend (pid, so that pg_backend_pid(), pg_stat_activity and
// pg_terminate_backend find what the client knows; sessions are one to one
// with backends) and a secret of Ordo's own, so that cancel requests come
// to Ordo. A pid of 0 (PostgreSQL sent no BackendKeyData) gets one of
// Ordo's own, unused by any session.
func (s *Server) registerKey(ss *session, pid uint32) {
	var b [4]byte
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		_, _ = rand.Read(b[:])
		p := pid
		if p == 0 {
			p = s.nextPID.Add(1) & 0x7fffffff
			if p == 0 {
				continue
			}
		}
		k := uint64(p)<<32 | uint64(binary.BigEndian.Uint32(b[:]))
		if _, dup := s.cancelKey[k]; dup {
			continue
		}
		ss.key = k
		s.cancelKey[k] = ss
		return
	}
}

// release forgets a session.
func (s *Server) release(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[ss]; ok {
		delete(s.sessions, ss)
		s.active--
		s.m.connsActive.Dec()
	}
	if ss.key != 0 && s.cancelKey[ss.key] == ss {
		delete(s.cancelKey, ss.key)
	}
}

// cancel forwards a client's CancelRequest to the backend of the session
// that owns the key. An unknown key does nothing, as in PostgreSQL; so
// does a secret of any length but the four bytes of the keys Ordo gives.
func (s *Server) cancel(pid uint32, secret []byte) {
	s.m.cancels.Inc()
	var ss *session
	if len(secret) == 4 {
		s.mu.Lock()
		ss = s.cancelKey[uint64(pid)<<32|uint64(binary.BigEndian.Uint32(secret))]
		s.mu.Unlock()
	}
	if ss == nil {
		s.log.Debug("cancel request with unknown key", "pid", pid)
		return
	}
	// PostgreSQL first: once cancelBackend returns, its postmaster has
	// signalled the backend, so a session that a hook's wait ended
	// (clientCanceled) does not meet the cancel in what it sends next.
	if err := ss.cancelBackend(); err != nil {
		s.log.Warn("forward cancel request", "session", ss.id, "err", err)
	}
	ss.clientCanceled()
}

// sessionsSnapshot returns the established sessions (for tests and
// diagnostics).
func (s *Server) sessionsSnapshot() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		out = append(out, ss)
	}
	return out
}
