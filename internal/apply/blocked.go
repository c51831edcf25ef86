package apply

import (
	"context"
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
func (a *Applier) watch(ctx context.Context, w *worker, seqno uint64, order *ordering) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reported := map[int]bool{}
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
				if !reported[p] {
					reported[p] = true
					foreign = append(foreign, p)
				}
			}
			if len(foreign) > 0 && a.cfg.OnBlocked != nil {
				slices.Sort(foreign)
				a.metrics.blocked.Inc()
				a.cfg.Logger.Info("apply: local transactions block an apply", "seqno", seqno, "pids", foreign)
				a.cfg.OnBlocked(foreign)
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
	if err := a.monitor.QueryRow(qctx, "SELECT pg_blocking_pids($1)", pid).Scan(&pids); err != nil {
		return nil, err
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, nil
}

func (a *Applier) workerByPID(pid int) *worker {
	a.pidMu.Lock()
	defer a.pidMu.Unlock()
	return a.pids[pid]
}
