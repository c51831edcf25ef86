package benchcluster

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// delayLink forwards TCP connections to target, holding every chunk of
// bytes, in each direction, for a one-way delay that can change while it
// runs (a wide-area link between two nodes on one machine).
type delayLink struct {
	ln     net.Listener
	target string
	delay  *atomic.Int64 // nanoseconds
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newDelayLink(target string, delay *atomic.Int64) (*delayLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &delayLink{ln: ln, target: target, delay: delay}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *delayLink) addr() string { return l.ln.Addr().String() }

func (l *delayLink) accept() {
	defer l.wg.Done()
	for {
		src, err := l.ln.Accept()
		if err != nil {
			return
		}
		dst, err := net.Dial("tcp", l.target)
		if err != nil {
			src.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, src, dst)
		l.mu.Unlock()
		l.wg.Add(2)
		go l.pipe(dst, src)
		go l.pipe(src, dst)
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each chunk delivered delay after it was read,
// in order.
func (l *delayLink) pipe(dst, src net.Conn) {
	defer l.wg.Done()
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.data); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(time.Duration(l.delay.Load())), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			close(q)
			<-done
			if tc, ok := dst.(*net.TCPConn); ok && err == io.EOF {
				tc.CloseWrite()
			} else {
				dst.Close()
			}
			return
		}
	}
}

func (l *delayLink) close() {
	l.ln.Close()
	l.mu.Lock()
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
