package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ordo-db/ordo/internal/totalorder"
)

// untilTaken, as proposeInBackground's attempts: what must reach the
// order is proposed until it does. A bound (it was 1000 attempts) let a
// partition of a few hours leave a transaction prepared, or conflict
// classes held, for good once it healed: nothing else would propose them.
const untilTaken = 0

// retryItem is a background proposal waiting for its next attempt.
type retryItem struct {
	payload  []byte
	limit    int // attempts in all, untilTaken for no bound
	what     string
	gaveUp   func(error)
	attempts int // made so far
	err      error
}

// retryBatch bounds the proposals of the retry queue attempted at once.
const retryBatch = 32

// proposeInBackground proposes payload, at once from a tracked goroutine,
// then, if that fails, from the retry queue until the order takes it, up
// to attempts times in all (untilTaken: without a bound). It stops when
// the order stops or removed this node (nothing more is said), when the
// order refuses the payload as too large, and when this node stops
// carrying out the order (r.down: Run waits for these goroutines; a
// restart resolves what is left, ResolveLeftovers); gaveUp says so for
// those two (for the first ten waiting when the node stops: a count of
// the rest is logged) and for a bound reached. While an unbounded proposal keeps
// failing, what it is for is logged at its 10th, 100th, 1000th… attempt.
//
// One goroutine retries every proposal that failed, a batch at a time,
// with pauses of proposePause: a node cut off from the majority for
// hours, whose every failed commit orders an abort, holds a queue of
// small payloads, not a goroutine each.
func (r *Replica) proposeInBackground(payload []byte, attempts int, what string, gaveUp func(error)) {
	it := &retryItem{payload: payload, limit: attempts, what: what, gaveUp: gaveUp}
	r.retryMu.Lock()
	if r.bgClosed {
		r.retryMu.Unlock()
		gaveUp(errors.New("this node stopped carrying out the order"))
		return
	}
	r.bg.Add(1)
	r.retryMu.Unlock()
	go func() {
		defer r.bg.Done()
		if r.attempt(it) {
			r.requeue([]*retryItem{it})
		}
	}()
}

// attempt proposes it once and reports whether it is to be tried again.
func (r *Replica) attempt(it *retryItem) (again bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := r.cfg.Order.Propose(ctx, it.payload)
	cancel()
	it.attempts++
	it.err = err
	switch {
	case err == nil || errors.Is(err, totalorder.ErrStopped) || errors.Is(err, totalorder.ErrRemoved):
		return false
	case errors.Is(err, totalorder.ErrTooLarge) || it.limit != untilTaken && it.attempts >= it.limit:
		it.gaveUp(err)
		return false
	}
	if it.limit == untilTaken && it.attempts >= 10 && isPowerOfTen(it.attempts) {
		r.log.Warn("still not in the order; proposed again until it is", "what", it.what, "attempts", it.attempts, "err", err)
	}
	return true
}

// requeue puts items in the retry queue, and starts its goroutine if it
// is not running.
func (r *Replica) requeue(items []*retryItem) {
	r.retryMu.Lock()
	defer r.retryMu.Unlock()
	r.retrying = append(r.retrying, items...)
	if r.retrier || len(r.retrying) == 0 {
		return
	}
	r.retrier = true
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		r.retryLoop()
	}()
}

// retryLoop attempts the retry queue's proposals until it is empty: after
// a pause (growing while whole rounds fail), a batch at a time; a batch
// that fails whole leaves the rest of the round for the next one.
func (r *Replica) retryLoop() {
	for round := 1; ; round++ {
		select {
		case <-time.After(proposePause(round)):
		case <-r.down:
			r.retryMu.Lock()
			items := r.retrying
			r.retrying, r.retrier = nil, false
			r.retryMu.Unlock()
			for i, it := range items {
				if i == 10 {
					r.log.Error("and more proposals not in the order when this node stopped carrying it out", "more", len(items)-i)
					break
				}
				it.gaveUp(fmt.Errorf("this node stopped carrying out the order: %w", it.err))
			}
			return
		}
		r.retryMu.Lock()
		items := r.retrying
		r.retrying = nil
		r.retryMu.Unlock()
		var again []*retryItem
		taken := false
		for len(items) > 0 {
			n := min(len(items), retryBatch)
			batch := items[:n]
			items = items[n:]
			failed := make([]bool, n)
			var wg sync.WaitGroup
			for i, it := range batch {
				wg.Go(func() { failed[i] = r.attempt(it) })
			}
			wg.Wait()
			whole := true
			for i, it := range batch {
				if failed[i] {
					again = append(again, it)
				} else {
					whole = false
				}
			}
			if whole {
				again = append(again, items...) // (not attempted this round)
				break
			}
			taken = true
		}
		if taken {
			round = 0 // the order takes proposals again: no long pause
		}
		r.retryMu.Lock()
		r.retrying = append(again, r.retrying...)
		if len(r.retrying) == 0 {
			r.retrier = false
			r.retryMu.Unlock()
			return
		}
		r.retryMu.Unlock()
	}
}

// waitBackground waits for the goroutines of bg when Run ends; a
// background proposal asked for from then on is not made (its gaveUp
// says so).
func (r *Replica) waitBackground() {
	r.retryMu.Lock()
	r.bgClosed = true
	r.retryMu.Unlock()
	r.bg.Wait()
}

// proposePause is the pause before a round of the retry queue: a second,
// growing to ten while whole rounds fail (a proposal that failed waited
// up to its own ten-second timeout already). Tests shorten it.
var proposePause = func(round int) time.Duration {
	return min(time.Duration(round)*time.Second, 10*time.Second)
}

// isPowerOfTen reports whether n is 1, 10, 100, …
func isPowerOfTen(n int) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}
