package catalog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Cache holds the current catalog snapshot of one node's PostgreSQL.
// Sessions read Current on every statement; whoever runs DDL (or sees it
// applied) calls Refresh. Each refresh gets a higher version.
type Cache struct {
	load     func(ctx context.Context) (Description, error)
	cur      atomic.Pointer[Catalog]
	mu       sync.Mutex // serializes Refresh
	versions uint64
}

// NewCache returns a cache whose Refresh calls load (typically a closure
// around Load with a connection and the granule configuration). The cache
// is empty until the first successful Refresh.
func NewCache(load func(ctx context.Context) (Description, error)) *Cache {
	return &Cache{load: load}
}

// Current returns the latest snapshot, nil before the first Refresh.
func (c *Cache) Current() *Catalog { return c.cur.Load() }

// Refresh reloads the catalog and swaps it in. On error the previous
// snapshot stays current.
func (c *Cache) Refresh(ctx context.Context) (*Catalog, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
