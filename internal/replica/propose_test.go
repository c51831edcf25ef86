package replica

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
)

// unavailableOrder fails every proposal with ErrNoQuorum until down
// proposals have failed, then takes them. A fake is enough: the test is of
// the retry's own logic, not of the total order.
type unavailableOrder struct {
	mu       sync.Mutex
	down     int
	failed   int
	accepted int
}

func (o *unavailableOrder) Propose(ctx context.Context, payload []byte) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed < o.down {
		o.failed++
		return 0, totalorder.ErrNoQuorum
	}
	o.accepted++
	return uint64(o.failed + o.accepted), nil
}
func (o *unavailableOrder) Deliveries() <-chan totalorder.Delivery        { return nil }
func (o *unavailableOrder) MarkApplied(uint64)                            {}
func (o *unavailableOrder) ReadIndex(ctx context.Context) (uint64, error) { return 0, nil }

func (o *unavailableOrder) counts() (failed, accepted int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed, o.accepted
}

// TestRetryProposesUntilTheOrderTakesIt: the abort of a prepared
// transaction, and the release of conflict classes, must reach the order
// however long it is unavailable. With a bound on the attempts (there was
// one: 1000, about three hours), a longer partition left the transaction
// prepared, holding its locks, and the classes granted, after it healed:
// nothing else proposes them again.
func TestRetryProposesUntilTheOrderTakesIt(t *testing.T) {
	defer func(p func(int) time.Duration) { proposePause = p }(proposePause)
	proposePause = func(int) time.Duration { return 0 }
	order := &unavailableOrder{down: 5000}
	r, err := New(Config{NodeID: 1, Protocol: CONS, Order: order})
	require.NoError(t, err)
	r.abortInBackground(txn.GID("ordo_1_7"), "")
	r.releaseClasses(txn.GID("ordo_1_8"))
	waitBG(t, r)
	failed, accepted := order.counts()
	require.Equal(t, 5000, failed)
	require.Equal(t, 2, accepted, "the abort and the release, once the order took proposals again")
}

// TestRetryStopsWithTheNode: Run waits for the background
// proposals before it returns, so one that keeps failing stops when the
// node stops carrying out the order (its restart resolves the rest).
func TestRetryStopsWithTheNode(t *testing.T) {
	defer func(p func(int) time.Duration) { proposePause = p }(proposePause)
	proposePause = func(int) time.Duration { return time.Hour }
	order := &unavailableOrder{down: 1 << 30}
	r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order})
	require.NoError(t, err)
	gaveUp := make(chan error, 1)
	r.proposeInBackground([]byte{}, untilTaken, "a test's entry", func(err error) { gaveUp <- err })
	require.Eventually(t, func() bool { f, _ := order.counts(); return f == 1 }, 5*time.Second, time.Millisecond)
	r.stopWaiting()
	done := make(chan struct{})
	go func() { r.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a failing background proposal kept the node from stopping")
	}
	require.True(t, errors.Is(<-gaveUp, totalorder.ErrNoQuorum), "gaveUp says why")
}

func TestIsPowerOfTen(t *testing.T) {
	for n, want := range map[int]bool{1: true, 10: true, 100: true, 1000: true, 0: false, 2: false, 20: false, 110: false, 1001: false} {
		require.Equal(t, want, isPowerOfTen(n), n)
	}
}

// TestRetryQueueHoldsFailedProposals: a node cut off from the majority for
// hours orders the abort of every commit that failed meanwhile; those
// wait in one retry queue, not in a goroutine each, and all reach the
// order once it takes proposals again.
func TestRetryQueueHoldsFailedProposals(t *testing.T) {
	defer func(p func(int) time.Duration) { proposePause = p }(proposePause)
	proposePause = func(int) time.Duration { return 10 * time.Millisecond }
	order := &unavailableOrder{down: 1 << 30}
	r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order})
	require.NoError(t, err)
	before := runtime.NumGoroutine()
	const n = 2000
	for i := range n {
		r.abortInBackground(txn.GID(fmt.Sprintf("ordo_1_%d", i+1)), "")
	}
	require.Eventually(t, func() bool {
		r.retryMu.Lock()
		defer r.retryMu.Unlock()
		return len(r.retrying) >= n-retryBatch
	}, 10*time.Second, time.Millisecond, "every failed first attempt is queued")
	require.Less(t, runtime.NumGoroutine()-before, 100, "goroutines while %d proposals wait", n)
	order.mu.Lock()
	order.down = 0 // the partition heals
	order.mu.Unlock()
	waitBG(t, r)
	_, accepted := order.counts()
	require.Equal(t, n, accepted)
}

// TestRetryNotStartedAfterTheLoopEnds: once Run waits for its
// background goroutines, a proposal asked for by a session is not made
// (gaveUp says so) rather than joining the wait group from zero while it
// is waited for, which the WaitGroup may panic on.
func TestRetryNotStartedAfterTheLoopEnds(t *testing.T) {
	order := &unavailableOrder{}
	r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var gaveUp atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			for j := range 2000 {
				r.proposeInBackground([]byte{byte(i), byte(j)}, untilTaken, "a test's entry", func(error) { gaveUp.Add(1) })
			}
		})
	}
	r.stopWaiting()
	r.waitBackground()
	wg.Wait()
	r.bg.Wait()
	_, accepted := order.counts()
	require.Equal(t, 8*2000, accepted+int(gaveUp.Load()), "each proposal made, or said not to be")
	// After the wait, a proposal asked for is said not to be made, at
	// once, and the order never sees it.
	said := make(chan error, 1)
	r.proposeInBackground([]byte{1}, untilTaken, "a test's entry", func(err error) { said <- err })
	select {
	case err := <-said:
		require.ErrorContains(t, err, "stopped")
	case <-time.After(time.Second):
		t.Fatal("a background proposal was started after Run's wait for them")
	}
	r.bg.Wait()
	_, after := order.counts()
	require.Equal(t, accepted, after)
}

// waitBG waits for r's background goroutines, failing the test if they
// do not end within a minute.
func waitBG(t *testing.T, r *Replica) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("background proposals still running after a minute")
	}
}
