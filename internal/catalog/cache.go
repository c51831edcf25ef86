package catalog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Cache holds the current catalog snapshot of one node's PostgreSQL.
// Sessions read Current on every statement; whoever runs DDL (or sees it
// applied) calls Invalidate as soon as it commits, then Refresh. Each
// refresh gets a higher version.
type Cache struct {
	load     func(ctx context.Context) (Description, error)
	cur      atomic.Pointer[Catalog]
	mu       sync.Mutex // serializes Refresh
	versions uint64

	// invalidated counts Invalidate calls; covered is the count the last
	// Refresh to end had seen when it started. Current waits while
	// covered < invalidated, for refreshed (closed, then replaced, when
	// a Refresh ends).
	invalidated, covered atomic.Uint64
	wmu                  sync.Mutex
	refreshed            chan struct{}
}

// StaleWait bounds how long Current waits for the Refresh after an
// Invalidate; past it Current returns the catalog it has.
const StaleWait = 5 * time.Second

// NewCache returns a cache whose Refresh calls load (typically a Loader's
// Load). The cache is empty until the first successful Refresh.
func NewCache(load func(ctx context.Context) (Description, error)) *Cache {
	return &Cache{load: load, refreshed: make(chan struct{})}
}

// Current returns the latest snapshot, nil before the first Refresh.
// After Invalidate it waits, at most StaleWait, for the Refresh that
// follows (it ends the wait even when it fails), so that no statement is
// analyzed against a catalog older than a schema change PostgreSQL
// already shows.
func (c *Cache) Current() *Catalog {
	want := c.invalidated.Load()
	if c.covered.Load() >= want {
		return c.cur.Load()
	}
	timeout := time.NewTimer(StaleWait)
	defer timeout.Stop()
	for c.covered.Load() < want {
		c.wmu.Lock()
		ch := c.refreshed
		c.wmu.Unlock()
		if c.covered.Load() >= want {
			break
		}
		select {
		case <-ch:
		case <-timeout.C:
			return c.cur.Load()
		}
	}
	return c.cur.Load()
}

// Invalidate marks the catalog out of date until a Refresh that starts
// after it ends: Current waits for it. Call it right after a schema
// change commits, then Refresh.
func (c *Cache) Invalidate() { c.invalidated.Add(1) }

// Refresh reloads the catalog and swaps it in. On error the previous
// snapshot stays current.
func (c *Cache) Refresh(ctx context.Context) (*Catalog, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.invalidated.Load()
	defer c.wake(seen)
	d, err := c.load(ctx)
	if err != nil {
		return nil, err
	}
	c.versions++
	cat, err := New(d, c.versions)
	if err != nil {
		return nil, fmt.Errorf("catalog: refresh: %w", err)
	}
	c.cur.Store(cat)
	return cat, nil
}

// wake records that the invalidations up to seen are covered and wakes
// Current's waiters.
func (c *Cache) wake(seen uint64) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if seen > c.covered.Load() {
		c.covered.Store(seen)
	}
	close(c.refreshed)
	c.refreshed = make(chan struct{})
}
