package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/totalorder"
)

// refuse is the sessions' Refuse: a node removed from the cluster refuses
// new clients with a message that says so.
func (n *Node) refuse() error {
	if errors.Is(n.order.Err(), totalorder.ErrRemoved) {
		return fmt.Errorf("ordo: node %d was removed from the cluster (ordoctl member remove) and serves no clients; connect to another node", n.cfg.ID)
	}
	if n.draining.Load() {
		return fmt.Errorf("ordo: node %d is draining (ordoctl drain) and takes no new clients; connect to another node", n.cfg.ID)
	}
	return nil
}

// endSessionsWhenRemoved waits until the total order stops; if this node
// was removed, it ends every client session (their backends are
// terminated: a transaction waiting on a lock that nothing here will ever
// release would wait for good), while refuse turns new clients away. If
// the order failed (its Raft log could not be written: a full disk, an
// I/O error), the node stops with that error: it could order nothing, and
// it used to go on serving clients, preparing their transactions and
// answering each commit with 08007, with nothing in its log.
func (n *Node) endSessionsWhenRemoved(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-n.order.Done():
	}
	err := n.order.Err()
	if err != nil && !errors.Is(err, totalorder.ErrRemoved) && ctx.Err() == nil {
		n.log.Error("the total order failed: this node stops (its clients' transactions not yet ordered are decided by the cluster: committed everywhere or nowhere); fix the cause and start it again", "err", err)
		select {
		case n.errc <- fmt.Errorf("the total order failed: %w", err):
		default: // (another failure already stops the node)
		}
		return
	}
	if !errors.Is(err, totalorder.ErrRemoved) {
		return
	}
	pids := n.hooks.SessionPIDs()
	n.log.Error("this node was removed from the cluster: it refuses new clients, ends its sessions, and never starts again with this identity (wipe it and join it with a new id)", "sessions", len(pids))
	if len(pids) == 0 {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(tctx, n.cfg.Postgres)
	if err != nil {
		n.log.Warn("removed: connect to end the sessions", "err", err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(tctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY($1)", pids); err != nil {
		n.log.Warn("removed: end the sessions", "err", err)
	}
}

// caughtUpLag is how far behind (Raft entries committed but not applied,
// plus entries delivered but not carried out) a learner may be to count
// as caught up.
const caughtUpLag = 100

// promoteWhenCaughtUp makes this node a voter once it is a learner that
// has caught up with the order (twice in a row, half a second apart). It
// returns once the node is a voter, or when ctx ends.
func (n *Node) promoteWhenCaughtUp(ctx context.Context) {
	promoteWhenCaughtUp(ctx, n.order, uint64(n.cfg.ID), n.log, func() (uint64, bool) {
		if n.replica.Err() != nil {
			return 0, false
		}
		return sub(n.order.Delivered(), n.replica.AppliedPrefix()), true
	})
}

// promoteWhenCaughtUp makes member id a voter once it is a learner whose
// lag (Raft entries committed but not applied, plus what behind adds: its
// consumer's own lag; false: not ready at all) is at most caughtUpLag,
// twice in a row, half a second apart. It returns once id is a voter, or
// when ctx ends.
func promoteWhenCaughtUp(ctx context.Context, order *totalorder.Node, id uint64, log *slog.Logger, behind func() (uint64, bool)) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	steady := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		learner, member := false, false
		for _, m := range order.MemberInfos() {
			if m.ID == id {
				member, learner = true, m.Learner
			}
		}
		if member && !learner {
			return
		}
		more, ok := behind()
		if !member || !ok {
			steady = 0
			continue
		}
		st := order.Status()
		if st.Lead == 0 || sub(st.Commit, st.Applied)+more > caughtUpLag {
			steady = 0
			continue
		}
		if steady++; steady < 2 {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := order.Promote(pctx, id)
		cancel()
		if err != nil {
			log.Warn("learner: promotion to voter failed; retrying", "err", err)
			continue
		}
		log.Info("learner caught up and promoted itself to voter")
		return
	}
}

func sub(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

// advertised is the peer address other members reach this node at: its
// peer_listen, which must name a host (not a wildcard) to join.
func advertised(peerListen string) (string, error) {
	host, _, err := net.SplitHostPort(peerListen)
	if err != nil {
		return "", fmt.Errorf("node: peer_listen %q: %w", peerListen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("node: join: peer_listen %q does not say where the other members reach this node; give its host name or address", peerListen)
	}
	return peerListen, nil
}
