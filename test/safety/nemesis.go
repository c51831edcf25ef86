package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/history"
)

// window is one fault, from its injection to its healing.
type window struct {
	Fault      string
	Node       int // 1-based
	Start, End time.Duration
	Note       string
}

// A fault is injected on node i (0-based), lasts d, and is healed before
// it returns; the note goes to the report.
type fault func(r *run, i int, d time.Duration) string

var nemeses = map[string]fault{
	"kill":         killOrdo,
	"partition":    partition,
	"backend-kill": killBackend,
}

// killOrdo: SIGKILL of node i's ordo process, restarted after d.
func killOrdo(r *run, i int, d time.Duration) string {
	r.nodeLock(i).Lock()
	defer r.nodeLock(i).Unlock()
	r.cluster.Kill(i)
	time.Sleep(d)
	if err := r.cluster.Start(i); err != nil {
		return fmt.Sprintf("restart failed (the supervisor retries): %v", err)
	}
	return "restarted"
}

// partition: every peer link of node i cut both ways for d, then restored.
func partition(r *run, i int, d time.Duration) string {
	r.cluster.Isolate(i)
	time.Sleep(d)
	r.cluster.Heal()
	return "healed"
}

// killBackend: SIGKILL of one client backend of node i's PostgreSQL (its
// postmaster then reinitializes: every connection dies and the unflushed
// WAL tail is lost). The node may exit by design; the supervisor restarts it.
func killBackend(r *run, i int, d time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.cluster.PGDSN(i))
	if err != nil {
		return fmt.Sprintf("could not connect: %v", err)
	}
	var pid int
	err = conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'
		AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1`).Scan(&pid)
	conn.Close(ctx)
	if err != nil {
		return fmt.Sprintf("no backend to kill: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Sprintf("kill %d: %v", pid, err)
	}
	time.Sleep(d)
	return fmt.Sprintf("killed backend pid %d", pid)
}

func (r *run) nodeLock(i int) *nodeMutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodeMu == nil {
		r.nodeMu = map[int]*nodeMutex{}
	}
	if r.nodeMu[i] == nil {
		r.nodeMu[i] = &nodeMutex{}
	}
	return r.nodeMu[i]
}

// nemesis injects the configured faults in turn, each on a random node,
// until end (a time since the start of the history).
func (r *run) nemesis(end time.Duration) {
	if len(r.cfg.Nemeses) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(r.seed, 7))
	time.Sleep(2 * time.Second) // a fault-free start
	for k := 0; r.rec.Since()+r.cfg.FaultTime+time.Second < end; k++ {
		name := r.cfg.Nemeses[k%len(r.cfg.Nemeses)]
		i := rng.IntN(r.cluster.N())
		if r.cfg.FaultNode > 0 {
			i = r.cfg.FaultNode - 1
		}
		r.rec.Record(history.Info, history.NemesisProcess, i+1, "nemesis", map[string]string{"fault": name, "phase": "start"}, "")
		r.logf("%.1fs: %s node %d", r.rec.Since().Seconds(), name, i+1)
		w := window{Fault: name, Node: i + 1, Start: r.rec.Since()}
		w.Note = nemeses[name](r, i, r.cfg.FaultTime)
		w.End = r.rec.Since()
		r.rec.Record(history.Info, history.NemesisProcess, i+1, "nemesis", map[string]string{"fault": name, "phase": "end", "note": w.Note}, "")
		r.mu.Lock()
		r.windows = append(r.windows, w)
		r.mu.Unlock()
		time.Sleep(r.cfg.QuietTime)
	}
}

// supervise restarts any ordo process that exited on its own, as a
// supervisor (systemd, Kubernetes) would, until stop is closed.
func (r *run) supervise(stop <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for i := 0; i < r.cluster.N(); i++ {
			l := r.nodeLock(i)
			if !l.TryLock() {
				continue // the nemesis holds it down
			}
			if r.cluster.Exited(i) {
				r.cluster.Kill(i) // reap
				r.note("supervisor: node %d exited on its own; restarting it. Log tail:\n        %s", i+1, indent(tailOf(r, i)))
				r.rec.Record(history.Info, history.NemesisProcess, i+1, "supervisor", map[string]string{"action": "restart"}, "")
				if err := r.cluster.Start(i); err != nil {
					r.note("supervisor: node %d did not start: %v", i+1, err)
				}
			}
			l.Unlock()
		}
	}
}
