package node

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// drainEvery is how often a drain looks for sessions between transactions.
const drainEvery = 100 * time.Millisecond

// Drain implements admin.Drainer: the node refuses new clients (57P03,
// and /readyz answers 503 so a load balancer stops sending them), and
// ends each client session once it is between transactions, by
// terminating its backend (the client sees PostgreSQL's 57P01 on its
// next statement and reconnects, to another node). It returns when no
// session is left or timeout has passed, with the number still inside a
// transaction, which are left to finish (a later Drain ends them once
// they have). New clients are refused until Undrain.
func (n *Node) Drain(ctx context.Context, timeout time.Duration) (int, error) {
	if n.hooks == nil {
		return 0, fmt.Errorf("node: not serving clients yet")
	}
	if !n.draining.Swap(true) {
		n.log.Info("draining: new clients refused, sessions ended between transactions", "timeout", timeout)
	}
	conn, err := pgx.Connect(ctx, n.cfg.Postgres)
	if err != nil {
		return 0, fmt.Errorf("node: drain: %w", err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(timeout)
	for {
		idle, busy := n.hooks.IdlePIDs()
		if len(idle) > 0 {
			// PostgreSQL's own view too: a backend that has just begun a
			// statement or a transaction is left for the next round.
			if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY($1) AND state = 'idle'", idle); err != nil {
				return busy, fmt.Errorf("node: drain: end idle sessions: %w", err)
			}
		}
		if len(idle) == 0 && busy == 0 {
			n.log.Info("drained: no client session left")
			return 0, nil
		}
		if !time.Now().Before(deadline) {
			n.log.Warn("drain: timeout passed with sessions still inside a transaction; they are left to finish", "sessions", busy)
			return busy, nil
		}
		select {
		case <-ctx.Done():
			return busy, ctx.Err()
		case <-time.After(drainEvery):
		}
	}
}

// Undrain implements admin.Drainer: the node takes new clients again.
func (n *Node) Undrain() {
	if n.draining.Swap(false) {
		n.log.Info("drain over: the node takes clients again")
	}
}

// Draining implements admin.Drainer.
func (n *Node) Draining() bool { return n.draining.Load() }
