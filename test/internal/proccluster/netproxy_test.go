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
