package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
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
		return epollRelay(ln.(*net.TCPListener), backend)
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
func epollRelay(ln *net.TCPListener, backend string) error {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	lf, err := ln.File() // a blocking duplicate of the listener
	if err != nil {
		return err
	}
	lfd := int(lf.Fd())
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	add := func(fd int) error {
		return syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)})
	}
	if err := add(lfd); err != nil {
		return err
	}
	baddr, err := net.ResolveTCPAddr("tcp", backend)
	if err != nil {
		return err
	}
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], baddr.IP.To4())
	sa.Port = baddr.Port
	peer := map[int]int{}
	closePair := func(fd int) {
		p := peer[fd]
		for _, f := range []int{fd, p} {
			_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, f, nil)
			_ = syscall.Close(f)
			delete(peer, f)
		}
	}
	events := make([]syscall.EpollEvent, 128)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		accept := false
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				accept = true // after the batch: a closed fd's number is not reused under a stale event
				continue
			}
			p, ok := peer[fd]
			if !ok {
				continue // closed earlier in this batch
			}
			r, err := syscall.Read(fd, buf)
			for errors.Is(err, syscall.EINTR) {
				r, err = syscall.Read(fd, buf)
			}
			if r <= 0 || err != nil {
				closePair(fd)
				continue
			}
			if writeAll(p, buf[:r]) != nil {
				closePair(fd)
			}
		}
		if accept {
			c, _, err := syscall.Accept4(lfd, syscall.SOCK_CLOEXEC)
			if err != nil {
				continue
			}
			b, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err == nil {
				err = syscall.Connect(b, &sa)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "epoll relay: connect:", err)
				if b >= 0 {
					_ = syscall.Close(b)
				}
				_ = syscall.Close(c)
				continue
			}
			for _, f := range []int{c, b} {
				_ = syscall.SetsockoptInt(f, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
			}
			peer[c], peer[b] = b, c
			if add(c) != nil || add(b) != nil {
				closePair(c)
			}
		}
	}
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
