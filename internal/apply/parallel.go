package apply

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
)

// ordering makes the items of one ApplyBatch commit in seqno order.
type ordering struct {
	mu       sync.Mutex
	cond     chan struct{} // closed and replaced whenever prefix moves
	index    map[uint64]int
	finished []bool
	prefix   int // items [0, prefix) are committed or skipped
}

func newOrdering(items []Item) *ordering {
	o := &ordering{cond: make(chan struct{}), index: make(map[uint64]int, len(items)), finished: make([]bool, len(items))}
	for i, it := range items {
		o.index[it.Seqno] = i
	}
	return o
}

// waitPrev waits until every item before seqno has committed.
func (o *ordering) waitPrev(ctx context.Context, seqno uint64) error {
	i := o.index[seqno]
	for {
		o.mu.Lock()
		ok, ch := o.prefix >= i, o.cond
		o.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitAll waits until the items at indexes deps have committed.
func (o *ordering) waitAll(ctx context.Context, deps []int) error {
	for _, d := range deps {
		for {
			o.mu.Lock()
			ok, ch := o.finished[d], o.cond
			o.mu.Unlock()
			if ok {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// done marks seqno committed (or skipped).
func (o *ordering) done(seqno uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished[o.index[seqno]] = true
	for o.prefix < len(o.finished) && o.finished[o.prefix] {
		o.prefix++
	}
	close(o.cond)
	o.cond = make(chan struct{})
}

// footprint is what a write set touches, for conflict detection between
// items of a batch: row keys, and tables (all rows of a truncated table).
type footprint struct {
	rows      map[txn.Key]bool
	tables    map[txn.Key]bool // tables written
	truncated map[txn.Key]bool
}

func footprintOf(it Item) footprint {
	f := footprint{rows: map[txn.Key]bool{}, tables: map[txn.Key]bool{}, truncated: map[txn.Key]bool{}}
	for i := range it.WriteSet.Rows {
		r := &it.WriteSet.Rows[i]
		tk := r.Table.TableKey()
		f.tables[tk] = true
		if r.Op == capture.OpTruncate {
			f.truncated[tk] = true
			continue
		}
		f.rows[r.Key] = true
		if r.OldKey.Level != 0 {
			f.rows[r.OldKey] = true
		}
	}
	return f
}

func (f footprint) conflicts(g footprint) bool {
	for k := range f.truncated {
		if g.tables[k] {
			return true
		}
	}
	for k := range g.truncated {
		if f.tables[k] {
			return true
		}
	}
	small, big := f.rows, g.rows
	if len(small) > len(big) {
		small, big = big, small
	}
	for k := range small {
		if big[k] {
			return true
		}
	}
	return false
}

// ApplyBatch applies items (sorted by seqno here) using every worker: an
// item starts once every earlier item it conflicts with (a shared row key,
// or a truncated table the other writes) has committed, runs in parallel
// with the others, and commits only after every earlier item committed,
// so commits stay in seqno order. An item that fails in parallel (a lock
// wait on a later item, a unique violation caused by the order of
// execution) is rolled back and redone once all earlier items committed.
// It returns the first error; items after a failed one are not committed.
func (a *Applier) ApplyBatch(ctx context.Context, items []Item) error {
	items = append([]Item(nil), items...)
	sort.Slice(items, func(i, j int) bool { return items[i].Seqno < items[j].Seqno })
	for i := 1; i < len(items); i++ {
		if items[i].Seqno == items[i-1].Seqno {
			return fmt.Errorf("apply: seqno %d twice in one batch", items[i].Seqno)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	order := newOrdering(items)
	fps := make([]footprint, len(items))
	for i := range items {
		fps[i] = footprintOf(items[i])
	}
	free := make(chan *worker, len(a.workers))
	for _, w := range a.workers {
		free <- w
	}
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var first error
	fail := func(err error) {
		errMu.Lock()
		if first == nil {
			first = err
		}
		errMu.Unlock()
		cancel()
	}
	for i := range items {
		var deps []int
		for j := i - 1; j >= 0 && j >= i-256; j-- {
			if fps[i].conflicts(fps[j]) {
				deps = append(deps, j)
			}
		}
		if i > 256 {
			deps = append(deps, i-257) // beyond the window: plain order
		}
		if err := order.waitAll(ctx, deps); err != nil {
			break
		}
		var w *worker
		select {
		case w = <-free:
		case <-ctx.Done():
		}
		if w == nil {
			break
		}
		wg.Add(1)
		go func(it Item, w *worker) {
			defer wg.Done()
			defer func() { free <- w }()
			if _, err := a.run(ctx, w, it, order); err != nil {
				fail(fmt.Errorf("apply: seqno %d: %w", it.Seqno, err))
			}
		}(items[i], w)
	}
	wg.Wait()
	errMu.Lock()
	defer errMu.Unlock()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}
