package storage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInjectedSyncDelay: the delay written to the fault file slows each
// log fsync, and goes away when the file is emptied or the watch ends.
func TestInjectedSyncDelay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "delay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { WatchSyncDelayFile(ctx, path); close(done) }()
	require.NoError(t, os.WriteFile(path, []byte("300ms\n"), 0o644))
	require.Eventually(t, func() bool { return syncDelay.Load() == int64(300*time.Millisecond) }, 2*time.Second, 10*time.Millisecond)

	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	defer s.Close()
	start := time.Now()
	require.NoError(t, s.wal.sync(s.wal.f))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

	require.NoError(t, os.WriteFile(path, nil, 0o644))
	require.Eventually(t, func() bool { return syncDelay.Load() == 0 }, 2*time.Second, 10*time.Millisecond)
	require.NoError(t, os.WriteFile(path, []byte("1s"), 0o644))
	require.Eventually(t, func() bool { return syncDelay.Load() > 0 }, 2*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	require.Zero(t, syncDelay.Load(), "no delay once the watch ends")
}
