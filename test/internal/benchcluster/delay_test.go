package benchcluster

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDelayLink: bytes pass through unchanged and in order, each way
// after the delay set, which can change while connections are open.
func TestDelayLink(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	var delay atomic.Int64
	l, err := newDelayLink(echo.Addr().String(), &delay)
	require.NoError(t, err)
	defer l.close()
	c, err := net.Dial("tcp", l.addr())
	require.NoError(t, err)
	defer c.Close()
	roundTrip := func(msg []byte) time.Duration {
		t0 := time.Now()
		_, err := c.Write(msg)
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.True(t, bytes.Equal(msg, got))
		return time.Since(t0)
	}
	roundTrip([]byte("no delay yet"))
	delay.Store(int64(40 * time.Millisecond))
	big := bytes.Repeat([]byte("0123456789"), 20000) // several chunks
	require.GreaterOrEqual(t, roundTrip(big), 80*time.Millisecond, "40 ms each way")
}
