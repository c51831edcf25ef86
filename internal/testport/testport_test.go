package testport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPortsAreBelowTheEphemeralRange: the kernel never gives a port that
// Listen hands out to an outgoing connection (its ephemeral range, read
// from /proc), so a node stopped and restarted on it finds it free.
func TestPortsAreBelowTheEphemeralRange(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	require.NoError(t, err)
	f := strings.Fields(string(raw))
	require.Len(t, f, 2)
	first, err := strconv.Atoi(f[0])
	require.NoError(t, err)
	seen := map[int]bool{}
	for i := 0; i < 50; i++ {
		addr, err := Addr()
		require.NoError(t, err)
		_, p, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		port, err := strconv.Atoi(p)
		require.NoError(t, err)
		require.Less(t, port, first, "port %d is in the kernel's ephemeral range %s", port, strings.TrimSpace(string(raw)))
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
	}
}

// TestPortsAreReservedAcrossProcesses: a port this process handed out is
// locked for others (flock conflicts between open files, as between
// processes), and a port another holds is not handed out here.
func TestPortsAreReservedAcrossProcesses(t *testing.T) {
	l, err := Listen()
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	f, err := os.Open(filepath.Join(os.TempDir(), "ordo-test-ports", strconv.Itoa(port)))
	require.NoError(t, err)
	defer f.Close()
	require.ErrorIs(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK, "reserved for this process")

	// A port neither handed out here nor held by a process running beside
	// this test (other packages' tests reserve ports too), then held as
	// another process would.
	var g *os.File
	other := low
	for ; other < high; other++ {
		mu.Lock()
		free := !handed[other]
		mu.Unlock()
		if !free {
			continue
		}
		g, err = os.OpenFile(filepath.Join(os.TempDir(), "ordo-test-ports", strconv.Itoa(other)), os.O_CREATE|os.O_RDWR, 0o666)
		require.NoError(t, err)
		if syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			break
		}
		g.Close()
		g = nil
	}
	require.NotNil(t, g, "no port free to hold")
	defer g.Close()
	require.False(t, reserve(other), "a port another process holds")
}

// TestARangeHandedOutIsHandedOutAgain: once every port of the range was
// handed out (a long run: the e2e suite with -count=3 beside other
// suites reserved more than the range holds, and every cluster after
// that failed to start), one this process reserved and nothing listens
// on any more is handed out again; one still listened on is not.
func TestARangeHandedOutIsHandedOutAgain(t *testing.T) {
	mu.Lock()
	oldLow, oldHigh := low, high
	low, high = 31990, 31994 // (4 ports; others' reservations count too)
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		low, high = oldLow, oldHigh
		mu.Unlock()
	})
	// Hold every port this process can get (those of the range, and
	// those it reserved before, handed out again), so none is left.
	var open []net.Listener
	defer func() {
		for _, l := range open {
			l.Close()
		}
	}()
	for attempt := 0; attempt < 1000; attempt++ {
		l, err := Listen()
		if err != nil {
			break
		}
		open = append(open, l)
	}
	_, err := Listen()
	require.Error(t, err, "a port handed out while every one is listened on")
	inRange := -1
	for i, l := range open {
		if p := l.Addr().(*net.TCPAddr).Port; p >= 31990 && p < 31994 {
			inRange = i
		}
	}
	require.NotEqual(t, -1, inRange, "no port of the range free for this test")
	open[0], open[inRange] = open[inRange], open[0]
	freed := open[0].Addr().(*net.TCPAddr).Port
	require.NoError(t, open[0].Close())
	var again net.Listener
	for attempt := 0; attempt < 20 && again == nil; attempt++ {
		l, err := Listen()
		require.NoError(t, err, "a port freed, handed out again")
		if l.Addr().(*net.TCPAddr).Port == freed {
			again = l
		} else {
			l.Close()
		}
	}
	require.NotNil(t, again, "port %d not handed out again", freed)
	again.Close()
	open = open[1:]
}
