package storage

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// FaultSyncDelayEnv names a file whose content (a Go duration such as
// "2s"; missing or empty: none) delays every fsync of the Raft log by that
// much. It is a fault injection for the safety suite (docs/safety.md,
// nemesis slow-fsync), read by `ordo start` only when the variable is set:
// it never applies in an ordinary deployment.
const FaultSyncDelayEnv = "ORDO_FAULT_SYNC_DELAY_FILE"

// syncDelay is the injected delay of each log fsync, in nanoseconds.
var syncDelay atomic.Int64

// WatchSyncDelayFile sets the injected fsync delay from the file at path,
// read again every 100 ms until ctx ends (a file that cannot be read or
// parsed: no delay).
func WatchSyncDelayFile(ctx context.Context, path string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var d time.Duration
		if b, err := os.ReadFile(path); err == nil {
			d, _ = time.ParseDuration(strings.TrimSpace(string(b)))
		}
		syncDelay.Store(int64(max(d, 0)))
		select {
		case <-ctx.Done():
			syncDelay.Store(0)
			return
		case <-tick.C:
		}
	}
}

// injectedSyncDelay sleeps for the injected fsync delay, if any.
func injectedSyncDelay() {
	if d := syncDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
}
