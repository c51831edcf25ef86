package proccluster

import (
	"net"
	"sync"
	"sync/atomic"
)

// Link is a TCP proxy for one directed peer link: connections accepted on
// Addr are forwarded to the target. While cut, open connections are closed
// and new ones are closed as soon as they are accepted.
type Link struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	closed bool
	// swallow: what the dialing side sends is read and thrown away, the
	// connection left open (Swallow).
	swallow atomic.Bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewLink listens on a free 127.0.0.1 port and forwards to target.
func NewLink(target string) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the address the link listens on.
func (l *Link) Addr() string { return l.ln.Addr().String() }

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		refuse := l.cut || l.closed
		l.mu.Unlock()
		if refuse {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		if l.cut || l.closed {
			l.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		l.conns[in], l.conns[out] = struct{}{}, struct{}{}
		l.mu.Unlock()
		l.wg.Add(2)
		go l.pipe(in, out, false)
		go l.pipe(out, in, true)
	}
}

// pipe copies src to dst; forward: src is the dialing side, whose bytes
// Swallow throws away.
func (l *Link) pipe(dst, src net.Conn, forward bool) {
	defer l.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !forward || !l.swallow.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	l.mu.Lock()
	delete(l.conns, dst)
	delete(l.conns, src)
	l.mu.Unlock()
}

// Cut closes every connection of the link and refuses new ones.
func (l *Link) Cut() {
	l.mu.Lock()
	l.cut = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
}

// Restore lets the link carry connections again (and stops swallowing).
func (l *Link) Restore() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
	l.swallow.Store(false)
}

// Swallow makes the link lose what the dialing side sends, silently: its
// connections stay open and its writes succeed, as when a network loses
// the messages on a connection that then breaks (Cut afterwards).
func (l *Link) Swallow() { l.swallow.Store(true) }

// Close stops the link for good and waits for its goroutines.
func (l *Link) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.Cut()
	l.ln.Close()
	l.wg.Wait()
}

// Isolate cuts every link between node i and the other nodes, both ways.
func (c *Cluster) Isolate(i int) {
	for k, l := range c.links {
		if k[0] == i || k[1] == i {
			l.Cut()
		}
	}
}

// CutLink cuts the directed link from node i to node j (i's connections to
// j; j's connections to i go through the link j→i).
func (c *Cluster) CutLink(i, j int) { c.links[[2]int{i, j}].Cut() }

// SwallowLink makes the directed link from node i to node j lose what i
// sends on it (Link.Swallow).
func (c *Cluster) SwallowLink(i, j int) { c.links[[2]int{i, j}].Swallow() }

// Cut cuts the links between nodes i and j both ways; every other link is
// left as it is.
func (c *Cluster) Cut(i, j int) {
	c.links[[2]int{i, j}].Cut()
	c.links[[2]int{j, i}].Cut()
}

// IsolateAll cuts every link: no node reaches any other.
func (c *Cluster) IsolateAll() {
	for _, l := range c.links {
		l.Cut()
	}
}

// Heal restores every link.
func (c *Cluster) Heal() {
	for _, l := range c.links {
		l.Restore()
	}
}
