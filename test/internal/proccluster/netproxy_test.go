package proccluster

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

// TestLinkCutAndRestore: a cut link closes its open connections and refuses
// new ones; a restored link carries connections again.
func TestLinkCutAndRestore(t *testing.T) {
	l, err := NewLink(echoServer(t))
	require.NoError(t, err)
	defer l.Close()

	c, err := net.Dial("tcp", l.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(c))

	l.Cut()
	require.Error(t, roundTrip(c), "an open connection is closed by the cut")
	c2, err := net.Dial("tcp", l.Addr())
	require.NoError(t, err, "the listener still accepts…")
	require.Error(t, roundTrip(c2), "…and closes at once")
	c2.Close()

	l.Restore()
	c3, err := net.Dial("tcp", l.Addr())
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, roundTrip(c3))
}

// TestClusterCut: Cut(i, j) cuts both links between i and j and no other;
// IsolateAll cuts every link; Heal restores them.
func TestClusterCut(t *testing.T) {
	c := &Cluster{links: map[[2]int]*Link{}}
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if i == j {
				continue
			}
			l, err := NewLink(echoServer(t))
			require.NoError(t, err)
			defer l.Close()
			c.links[[2]int{i, j}] = l
		}
	}
	carries := func(i, j int) bool {
		conn, err := net.Dial("tcp", c.links[[2]int{i, j}].Addr())
		require.NoError(t, err)
		defer conn.Close()
		return roundTrip(conn) == nil
	}
	c.Cut(0, 1)
	for k := range c.links {
		cut := k == [2]int{0, 1} || k == [2]int{1, 0}
		require.Equal(t, !cut, carries(k[0], k[1]), "link %d→%d", k[0]+1, k[1]+1)
	}
	c.Heal()
	c.IsolateAll()
	for k := range c.links {
		require.False(t, carries(k[0], k[1]), "link %d→%d", k[0]+1, k[1]+1)
	}
	c.Heal()
	for k := range c.links {
		require.True(t, carries(k[0], k[1]), "link %d→%d", k[0]+1, k[1]+1)
	}
}
