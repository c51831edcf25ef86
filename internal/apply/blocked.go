package apply

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// watch starts a goroutine that, while a statement of w runs, asks
// pg_blocking_pids(w's pid) after BlockCheck, then at doubling intervals
// up to 16 × BlockCheck. Local backends that block it
// are passed to OnBlocked (each pid once per statement); an apply
// connection of a later write set of the same ApplyBatch that blocks it is
// preempted (its attempt cancelled, to be redone after this one commits).
// The returned function stops and waits for the goroutine.
func (a *Applier) watch(ctx context.Context, w *worker, seqno uint64, order *ordering, ddl bool) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A backend is reported once per statement (reporting it again
		// could hit its next transaction, even a read: pg_blocking_pids
		// may be stale by then), except pid 0, which stands for every
		// prepared transaction, old or new.
		reported := map[int]bool{}
		began := time.Now()
		warned := false
		every := a.cfg.BlockCheck
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pids, err := a.blockers(ctx, w.pid)
			if err != nil {
				if ctx.Err() == nil {
					a.cfg.Logger.Warn("apply: pg_blocking_pids", "err", err)
				}
			}
			var foreign []int
			for _, p := range pids {
				if ow := a.workerByPID(p); ow != nil {
					ow.mu.Lock()
					if order != nil && ow.preempt != nil && ow.seqno > seqno {
						ow.preempt()
					}
					ow.mu.Unlock()
					continue
				}
				if !reported[p] || p == 0 {
					reported[p] = true
					foreign = append(foreign, p)
				}
			}
			if len(pids) > 0 && !warned && time.Since(began) > time.Second {
				warned = true
				a.cfg.Logger.Warn("apply: blocked for over a second", "seqno", seqno, "blockers", a.describe(ctx, pids))
			}
			if len(foreign) > 0 && order != nil {
				// A local transaction blocks this write set; it may itself
				// wait for a lock of a later write set of the batch, which
				// waits (outside PostgreSQL, where no deadlock detector
				// sees it) for this one to commit. Preempt every later one.
				a.preemptAfter(seqno)
			}
			if len(foreign) > 0 && a.cfg.OnBlocked != nil {
				slices.Sort(foreign)
				a.metrics.blocked.Inc()
				a.cfg.Logger.Info("apply: local transactions block an apply", "seqno", seqno, "pids", foreign)
				a.cfg.OnBlocked(foreign, ddl)
			}
			every = min(2*every, 16*a.cfg.BlockCheck)
			t.Reset(every)
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// describe says what the backends pids are doing, for the log.
func (a *Applier) describe(ctx context.Context, pids []int) string {
	a.monMu.Lock()
	defer a.monMu.Unlock()
	if a.monitor == nil {
		return fmt.Sprint(pids)
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var out string
	err := a.monitor.QueryRow(qctx, `SELECT coalesce(string_agg(format('pid %s (%s, %s): %s', pid, backend_type, state, left(query, 80)), '; '), '')
		|| CASE WHEN 0 = ANY($1) THEN ' prepared: ' || (SELECT coalesce(string_agg(gid, ','), '') FROM pg_prepared_xacts) ELSE '' END
		FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&out)
	if err != nil {
		return fmt.Sprint(pids, " (", err, ")")
	}
	return out
}

// blockers returns pg_blocking_pids(pid).
func (a *Applier) blockers(ctx context.Context, pid int) ([]int, error) {
	a.monMu.Lock()
	defer a.monMu.Unlock()
	if err := a.monitorLocked(ctx); err != nil {
		return nil, err
	}
	qctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var pids []int32
	// Only locks held to the end of a transaction count: a relation
	// extension or page lock is held for an instant, so a backend holding
	// one blocks nobody for long (on a loaded machine, long enough to be
	// seen) and rolling its transaction back would free nothing; an
	// insert-only workload had local inserts aborted so.
	if err := a.monitor.QueryRow(qctx, `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_locks
			WHERE pid = $1 AND NOT granted AND locktype IN ('extend', 'page', 'frozenid'))
		THEN '{}'::int[] ELSE pg_blocking_pids($1) END`, pid).Scan(&pids); err != nil {
		return nil, err
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, nil
}

// preemptAfter cancels the attempts of the workers applying write sets
// after seqno; they are redone once the earlier ones committed.
func (a *Applier) preemptAfter(seqno uint64) {
	for _, w := range a.workers {
		w.mu.Lock()
		if w.preempt != nil && w.seqno > seqno {
			w.preempt()
		}
		w.mu.Unlock()
	}
}

func (a *Applier) workerByPID(pid int) *worker {
	a.pidMu.Lock()
	defer a.pidMu.Unlock()
	return a.pids[pid]
}
