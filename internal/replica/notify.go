package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/capture"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Notifications of transactions that replicate nothing else. A NOTIFY in
// a transaction that writes travels in its TxnEntry and is sent by every
// node that applies it. One on its own (an autocommit NOTIFY, or NOTIFYs
// in a transaction that wrote nothing) used to reach only the listeners
// of the node it ran on: its session now orders a NotifyEntry first
// (Notify), and every other node sends the notifications when its
// delivery loop reaches the entry, after the commits ordered before it
// are visible. The origin sends them itself, from the client's session,
// so that its own listeners see the client's backend as the sender.

// Notify orders a NotifyEntry for ns and returns once it is committed in
// the order (every other node then sends them when it reaches it).
// It implements termination.Notifier.
func (r *Replica) Notify(ctx context.Context, ns []capture.Notification) error {
	if len(ns) == 0 {
		return nil
	}
	if err := r.Err(); err != nil {
		return err
	}
	e := &ordov1.NotifyEntry{Origin: r.cfg.NodeID}
	for _, n := range ns {
		e.Notify = append(e.Notify, &ordov1.Notification{Channel: n.Channel, Payload: n.Payload})
	}
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Notify{Notify: e}})
	if err != nil {
		return fmt.Errorf("replica: encode notifications: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.CommitTimeout)
	defer cancel()
	if _, err := r.cfg.Order.Propose(pctx, payload); err != nil {
		return fmt.Errorf("replica: order notifications: %w", err)
	}
	return nil
}

// sendNotifications sends another node's notifications, ordered at
// seqno, in one transaction on the loop's connection. A failure is
// logged: notifications are not data, and PostgreSQL gives a listener
// that was not connected nothing either.
func (r *Replica) sendNotifications(ctx context.Context, seqno uint64, ns []*ordov1.Notification) {
	if len(ns) == 0 {
		return
	}
	var b pgx.Batch
	for _, n := range ns {
		b.Queue("SELECT pg_notify($1, $2)", n.Channel, n.Payload)
	}
	// One Sync for the batch: one implicit transaction, so they are sent
	// together, in order, at its commit.
	err := r.conn.SendBatch(ctx, &b).Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		r.log.Warn("another node's notifications could not be sent here", "seqno", seqno, "notifications", len(ns), "err", err)
	}
}
