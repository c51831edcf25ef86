package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The readiness rule's bounds.
const (
	// ReadyTimeout bounds the quorum check of one readiness check.
	ReadyTimeout = 2 * time.Second
	// MaxReadyLag is how many seqnos a ready node's applied prefix may
	// trail the commit point the quorum confirmed.
	MaxReadyLag = 1000
	// readyCache: a check answers every request for this long, so probes
	// from anyone who reaches the metrics address cost at most one
	// quorum round per interval.
	readyCache = time.Second
)

// Readiness decides whether the node can commit update transactions now
// (/readyz, Status.Ready). A node is ready when, in this order:
//
//  1. its total order runs (it was not removed, its log did not fail);
//  2. its replica accepts updates (replica.Err() is nil);
//  3. it knows a Raft leader;
//  4. a read index (a heartbeat round of the leader with a quorum)
//     succeeds within ReadyTimeout: a node cut off from the majority fails
//     here even while it still believes in an old leader;
//  5. its applied prefix is within MaxReadyLag seqnos of that read index.
//
// Results are kept for a second, and checks run one at a time.
type Readiness struct {
	order   Order
	replica Replica
	// draining, if set and true, makes the node not ready (it takes no
	// new clients: drain.go).
	draining func() bool

	mu   sync.Mutex
	at   time.Time
	last Ready
}

// NewReadiness returns the readiness check of a node.
func NewReadiness(o Order, r Replica) *Readiness {
	return &Readiness{order: o, replica: r}
}

// WhenDraining makes the node not ready while draining() is true.
func (r *Readiness) WhenDraining(draining func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.draining = draining
}

// drainChanged reports whether the node began or ended a drain since the
// cached answer (which then does not hold).
func (r *Readiness) drainChanged() bool {
	if r.draining == nil {
		return false
	}
	wasDraining := strings.HasPrefix(r.last.Reason, drainingReason)
	return r.draining() != wasDraining
}

const drainingReason = "draining"

// Check returns whether the node is ready, and why not.
func (r *Readiness) Check(ctx context.Context) Ready {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < readyCache && !r.drainChanged() {
		return r.last
	}
	r.last = r.check(ctx)
	r.at = time.Now()
	return r.last
}

func (r *Readiness) check(ctx context.Context) Ready {
	applied := r.replica.AppliedPrefix()
	notReady := func(format string, args ...any) Ready {
		return Ready{Reason: fmt.Sprintf(format, args...), AppliedPrefix: applied}
	}
	if err := r.order.Err(); err != nil {
		return notReady("the total order stopped: %v", err)
	}
	if r.draining != nil && r.draining() {
		return notReady(drainingReason + ": it takes no new clients (ordoctl drain --undo)")
	}
	if err := r.replica.Err(); err != nil {
		return notReady("refuses updates: %v", err)
	}
	if r.order.Leader() == 0 {
		return notReady("no Raft leader known (cut off from the majority, or an election is under way)")
	}
	// Not the caller's cancellation: the result answers other callers too.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReadyTimeout)
	defer cancel()
	idx, err := r.order.ReadIndex(cctx)
	if err != nil {
		return notReady("no quorum confirmed within %v (cut off from the majority, or far behind the log): %v", ReadyTimeout, err)
	}
	applied = r.replica.AppliedPrefix()
	if idx > applied && idx-applied > MaxReadyLag {
		return Ready{Reason: fmt.Sprintf("catching up: applied prefix %d, %d seqnos behind the cluster's %d", applied, idx-applied, idx),
			ReadIndex: idx, AppliedPrefix: applied}
	}
	return Ready{Ready: true, ReadIndex: idx, AppliedPrefix: applied}
}

// ServeHTTP answers GET /readyz: 200 when ready, 503 otherwise, with the
// Ready as JSON either way.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: "use GET"})
		return
	}
	rd := r.Check(req.Context())
	code := http.StatusOK
	if !rd.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, rd)
}

// writeJSON writes v as the response body with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
