package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// The two byte relays of -relays bound what a relay of each design can
// reach on this machine, whatever it does with the messages: each
// forwards bytes between a client and PostgreSQL and reads nothing.
//
//   - go-relay: two goroutines per connection, each copying one direction
//     (the node's design: Go's scheduler and netpoller wake a goroutine
//     per read).
//   - epoll-relay: one OS thread waiting in epoll_wait for every socket and
//     forwarding what one read returns with one write (PgBouncer's design).
//     It is relay-loop.md's way (a) for the node's loop: a goroutine in a
//     blocking epoll_wait, which holds its OS thread while it waits. The
//     epoll-procs-relay is the same with the default GOMAXPROCS, as in
//     the node.
//   - half-relay: the client's bytes through a goroutine per connection
//     (as go-relay), PostgreSQL's through one OS thread in epoll_wait (as
//     epoll-procs-relay): what the node would reach by moving only its
//     backend side, whose work never waits (relay-loop.md, "Inline or
//     not"), onto a loop.
//   - netpoll-relay: the same loop, waiting in Go's netpoller instead
//     (relay-loop.md's way (b)): its epoll descriptor is registered with
//     the runtime, which parks the goroutine without a thread and wakes it
//     when any socket is ready; the sockets themselves stay out of the
//     netpoller. Default GOMAXPROCS, as the node would run it.
//
// They are measurement tools for issue 17's relay lever, not Ordo code:
// no authentication, no protocol, no limits.

// runRelay serves kind ("go" or "epoll") in front of backend, printing
// its listen address, until SIGTERM (which exits); it returns only what
// stopped it otherwise.
func runRelay(kind, backend string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; os.Exit(0) }()
	switch kind {
	case "go":
		return goRelay(ln, backend)
	case "epoll":
		return epollRelay(ln.(*net.TCPListener), backend, true)
	case "epoll-procs":
		return epollRelay(ln.(*net.TCPListener), backend, false)
	case "netpoll":
		return netpollRelay(ln.(*net.TCPListener), backend)
	case "half":
		return halfRelay(ln, backend)
	}
	return fmt.Errorf("no relay %q", kind)
}

func goRelay(ln net.Listener, backend string) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			b, err := net.Dial("tcp", backend)
			if err != nil {
				return
			}
			defer b.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(c, b)
				c.Close()
				close(done)
			}()
			_, _ = io.Copy(b, c)
			b.Close()
			<-done
		}()
	}
}

// epollRelay runs on one locked OS thread with blocking sockets: epoll
// (level-triggered) says which can be read, one read takes what is there,
// and one write hands it on (a write blocks only when the peer's buffer is
// full, which pgbench's small messages never make it).
//
// one: GOMAXPROCS 1 (PgBouncer's one thread); without it, the runtime's
// other processor is there as it would be in the node, which runs Raft
// and gRPC beside the loop (epoll-procs-relay): sysmon may then retake
// the loop's processor while it waits in epoll_wait, and the loop must
// get one back when it wakes.
func epollRelay(ln *net.TCPListener, backend string, one bool) error {
	if one {
		runtime.GOMAXPROCS(1)
	}
	runtime.LockOSThread()
	l, err := newLoop(ln, backend)
	if err != nil {
		return err
	}
	for {
		n, err := syscall.EpollWait(l.ep, l.events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		l.handle(l.events[:n])
	}
}

// netpollRelay is epollRelay's loop (level-triggered, blocking sockets,
// one read and one write per ready socket) waiting in Go's netpoller: its
// epoll descriptor, made non-blocking, is an *os.File the runtime polls
// (edge-triggered). The function given to RawConn.Read polls without
// waiting (epoll_wait with a zero timeout) and declines only once a poll
// finds nothing ready: the runtime resets the descriptor's readiness
// before each call (prepareRead), and an edge comes only when the inner
// set's ready list turns non-empty, so declining while a socket is still
// ready would wait for ever (relay-loop.md, "How the loop waits").
func netpollRelay(ln *net.TCPListener, backend string) error {
	l, err := newLoop(ln, backend)
	if err != nil {
		return err
	}
	if err := syscall.SetNonblock(l.ep, true); err != nil {
		return err
	}
	epf := os.NewFile(uintptr(l.ep), "epoll") // non-blocking: the netpoller's
	rc, err := epf.SyscallConn()
	if err != nil {
		return err
	}
	var failed error
	err = rc.Read(func(uintptr) bool {
		for {
			n, err := syscall.EpollWait(l.ep, l.events, 0)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				failed = err
				return true
			}
			if n == 0 {
				return false // park until the set has a ready socket
			}
			l.handle(l.events[:n])
		}
	})
	if failed != nil {
		return failed
	}
	return err
}

// loop is the state of both epoll relays: the epoll set (level-triggered)
// and the listener in it, the backend's address, each socket's peer.
type loop struct {
	ep, lfd int
	sa      syscall.SockaddrInet4
	peer    map[int]int
	buf     []byte
	events  []syscall.EpollEvent
}

// newLoop makes a loop listening on ln (a blocking duplicate: accept
// only when epoll says it is ready) for connections to backend.
func newLoop(ln *net.TCPListener, backend string) (*loop, error) {
	lf, err := ln.File()
	if err != nil {
		return nil, err
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &loop{ep: ep, lfd: int(lf.Fd()), peer: map[int]int{}, buf: make([]byte, 64<<10), events: make([]syscall.EpollEvent, 128)}
	if err := l.add(l.lfd); err != nil {
		return nil, err
	}
	baddr, err := net.ResolveTCPAddr("tcp", backend)
	if err != nil {
		return nil, err
	}
	copy(l.sa.Addr[:], baddr.IP.To4())
	l.sa.Port = baddr.Port
	return l, nil
}

func (l *loop) add(fd int) error {
	return syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)})
}

func (l *loop) closePair(fd int) {
	p := l.peer[fd]
	for _, f := range []int{fd, p} {
		_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_DEL, f, nil)
		_ = syscall.Close(f)
		delete(l.peer, f)
	}
}

// handle forwards what one batch of events reports: one read of what a
// ready socket holds, one write of it to its peer, and accepts after the
// batch (a closed descriptor's number is not reused under a stale event).
func (l *loop) handle(events []syscall.EpollEvent) {
	accept := false
	for _, ev := range events {
		fd := int(ev.Fd)
		if fd == l.lfd {
			accept = true
			continue
		}
		p, ok := l.peer[fd]
		if !ok {
			continue
		}
		r, err := syscall.Read(fd, l.buf)
		for errors.Is(err, syscall.EINTR) {
			r, err = syscall.Read(fd, l.buf)
		}
		if r <= 0 || err != nil {
			l.closePair(fd)
			continue
		}
		if writeAll(p, l.buf[:r]) != nil {
			l.closePair(fd)
		}
	}
	if !accept {
		return
	}
	c, _, err := syscall.Accept4(l.lfd, syscall.SOCK_CLOEXEC)
	if err != nil {
		return
	}
	b, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err == nil {
		err = syscall.Connect(b, &l.sa)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay: connect:", err)
		if b >= 0 {
			_ = syscall.Close(b)
		}
		_ = syscall.Close(c)
		return
	}
	for _, f := range []int{c, b} {
		_ = syscall.SetsockoptInt(f, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	}
	l.peer[c], l.peer[b] = b, c
	if l.add(c) != nil || l.add(b) != nil {
		l.closePair(c)
	}
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
			continue // (EAGAIN: half-relay's non-blocking sockets; pgbench never fills them)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// halfRelay copies each client's bytes to PostgreSQL on a goroutine and
// PostgreSQL's back on one locked OS thread in a blocking epoll_wait
// (level-triggered) over the backend sockets, which stay Go connections
// (non-blocking; the thread reads and writes their descriptors itself and
// never asks the netpoller). Default GOMAXPROCS.
func halfRelay(ln net.Listener, backend string) error {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	type pair struct {
		c, b net.Conn
		cfd  int
	}
	var mu sync.Mutex
	pairs := map[int]*pair{} // backend descriptor -> its pair
	fdOf := func(c net.Conn) int {
		var fd int
		rc, _ := c.(syscall.Conn).SyscallConn()
		_ = rc.Control(func(f uintptr) { fd = int(f) })
		return fd
	}
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 64<<10)
		events := make([]syscall.EpollEvent, 128)
		for {
			n, err := syscall.EpollWait(ep, events, -1)
			if err != nil {
				continue // EINTR
			}
			for _, ev := range events[:n] {
				mu.Lock()
				p := pairs[int(ev.Fd)]
				mu.Unlock()
				if p == nil {
					continue
				}
				r, err := syscall.Read(int(ev.Fd), buf)
				if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
					continue
				}
				if r <= 0 || err != nil || writeAll(p.cfd, buf[:r]) != nil {
					mu.Lock()
					delete(pairs, int(ev.Fd))
					mu.Unlock()
					_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
					p.c.Close()
					p.b.Close()
				}
			}
		}
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		b, err := net.Dial("tcp", backend)
		if err != nil {
			c.Close()
			continue
		}
		p := &pair{c: c, b: b, cfd: fdOf(c)}
		bfd := fdOf(b)
		mu.Lock()
		pairs[bfd] = p
		mu.Unlock()
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, bfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(bfd)}); err != nil {
			c.Close()
			b.Close()
			continue
		}
		go func() {
			_, _ = io.Copy(b, c)
			b.Close()
		}()
	}
}
