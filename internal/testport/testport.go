// Package testport hands out loopback TCP ports for the clusters that
// tests and benchmarks start: in-process Raft nodes, `ordo start`
// processes, proxies, and internal/pglocal's PostgreSQL servers when no
// base port is given. A port it hands out stays free for its process
// across a node's stop and restart: it is below the kernel's ephemeral
// port range, so no outgoing connection takes it, and it is locked for
// the process's lifetime against every other process that uses this
// package (go test runs packages side by side).
//
// It must never choose a port a user configured or one a production node
// listens on: it is for test and benchmark clusters only (and pglocal's
// throwaway servers, which a demo started with free ports uses too).
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// The ports handed out: below Linux's default ephemeral range
// (32768-60999, /proc/sys/net/ipv4/ip_local_port_range).
var (
	low  = 20000
	high = 32000
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
	locks  []*os.File // the ports this process reserved, locked until it exits
	mine   []int      // those ports
)

// Listen listens on a loopback port below the kernel's ephemeral port
// range, one no process using this package has handed out before. A port
// picked by the kernel (":0") comes from the ephemeral range, where any
// outgoing connection may take it between the moment the listener is
// closed and the moment a node binds it again (seen: a node restarted on
// its address finds "address already in use" for seconds); below the
// range only another listener can, and reserve rules out those of other
// test processes.
func Listen() (net.Listener, error) {
	for attempt := 0; attempt < 1000; attempt++ {
		port := low + rand.IntN(high-low)
		mu.Lock()
		taken := handed[port]
		handed[port] = true
		mu.Unlock()
		if taken || !reserve(port) {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return l, nil
		}
	}
	// Every port of the range handed out: a long run (the e2e suite with
	// -count=3 beside other suites) reserves more than the range holds,
	// since none is given back. Hand out again one this process reserved
	// that nothing listens on now, most likely a finished test's (a node
	// of a running test stopped for a restart may lose its port: rarer
	// than every later cluster failing to start, as it did).
	mu.Lock()
	ports := append([]int(nil), mine...)
	mu.Unlock()
	start := 0
	if len(ports) > 0 {
		start = rand.IntN(len(ports))
	}
	for i := range ports {
		port := ports[(start+i)%len(ports)]
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("testport: no free loopback port in %d-%d", low, high)
}

// Addr returns a loopback address (host:port) whose port Listen handed
// out and that was free a moment ago.
func Addr() (string, error) {
	l, err := Listen()
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// reserve reports whether port is this process's to hand out: no other
// process holds a lock on its file in the temporary directory (seen in
// the e2e suite: a node restarted after a kill found its port taken by a
// cluster of the safety suite, which ran beside it). If the lock cannot
// be taken for another reason, only this process's record counts.
func reserve(port int) bool {
	dir := filepath.Join(os.TempDir(), "ordo-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return !errors.Is(err, syscall.EWOULDBLOCK)
	}
	mu.Lock()
	locks = append(locks, f)
	mine = append(mine, port)
	mu.Unlock()
	return true
}
