package replica

import (
	"sort"
	"sync"
	"time"

	"github.com/ordo-db/ordo/internal/txn"
)

// The hottest conflicts: which keys and tables certification aborts
// transactions on, over the last few minutes (ordoctl status). Every
// node decides every transaction alike, so each node's view is the
// cluster's.

const (
	hotBucket  = time.Minute
	hotBuckets = 5 // minutes kept
	hotTop     = 10
)

// Hot is a key or table and how many aborts conflicted on it.
type Hot struct {
	Name    string `json:"name"`
	Aborts  uint64 `json:"aborts"`
	Percent int    `json:"percent"` // of the conflicts in the window
}

// HotConflicts are the hottest conflicting keys and tables of the last
// Minutes minutes.
type HotConflicts struct {
	Minutes   int    `json:"minutes"`
	Conflicts uint64 `json:"conflicts"`
	Keys      []Hot  `json:"keys"`
	Tables    []Hot  `json:"tables"`
}

type hotMinute struct {
	start  time.Time
	keys   map[string]uint64
	tables map[string]uint64
}

// hotTracker counts conflicts per minute; safe for concurrent use.
type hotTracker struct {
	mu      sync.Mutex
	minutes []hotMinute // oldest first, at most hotBuckets
}

// record counts one abort that conflicted on k, at now.
func (h *hotTracker) record(k txn.Key, now time.Time) {
	if k.Level == 0 {
		return
	}
	start := now.Truncate(hotBucket)
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.minutes); n == 0 || h.minutes[n-1].start.Before(start) {
		h.minutes = append(h.minutes, hotMinute{start: start, keys: map[string]uint64{}, tables: map[string]uint64{}})
		if len(h.minutes) > hotBuckets {
			h.minutes = h.minutes[len(h.minutes)-hotBuckets:]
		}
	}
	m := &h.minutes[len(h.minutes)-1]
	m.keys[k.String()]++
	m.tables[k.TableKey().String()]++
}

// top returns the hottest keys and tables of the minutes before now.
func (h *hotTracker) top(now time.Time) HotConflicts {
	out := HotConflicts{Minutes: hotBuckets, Keys: []Hot{}, Tables: []Hot{}}
	since := now.Truncate(hotBucket).Add(-(hotBuckets - 1) * hotBucket)
	keys, tables := map[string]uint64{}, map[string]uint64{}
	h.mu.Lock()
	for _, m := range h.minutes {
		if m.start.Before(since) {
			continue
		}
		for k, n := range m.keys {
			keys[k] += n
			out.Conflicts += n
		}
		for t, n := range m.tables {
			tables[t] += n
		}
	}
	h.mu.Unlock()
	out.Keys, out.Tables = hottest(keys, out.Conflicts), hottest(tables, out.Conflicts)
	return out
}

func hottest(counts map[string]uint64, total uint64) []Hot {
	out := make([]Hot, 0, len(counts))
	for name, n := range counts {
		out = append(out, Hot{Name: name, Aborts: n, Percent: int(n * 100 / max(total, 1))})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Aborts != out[j].Aborts {
			return out[i].Aborts > out[j].Aborts
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > hotTop {
		out = out[:hotTop]
	}
	return out
}

// HotConflicts returns the keys and tables the most transactions aborted
// on in certification over the last minutes, hottest first.
func (r *Replica) HotConflicts() HotConflicts { return r.hot.top(time.Now()) }
