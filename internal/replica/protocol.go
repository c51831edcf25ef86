package replica

import (
	"context"

	"github.com/ordo-db/ordo/internal/txn"
)

// Protocol is a termination protocol as a session sees it. Replica
// implements it for dbsm and dbsm-si; pgr and cons will implement it too.
//
// Contract:
//
//  1. A session calls Terminate once per update transaction, after
//     PREPARE TRANSACTION t.GID succeeded and its write set was decoded.
//     Terminate returns the outcome once the protocol has decided it; the
//     protocol, not the session, runs COMMIT PREPARED or ROLLBACK PREPARED,
//     in delivery order with every other transaction.
//  2. An error from Terminate means the outcome is not known to the
//     session (ErrUnknownOutcome) or the node refuses updates
//     (ErrInconsistent); the protocol still resolves the prepared
//     transaction the same way on every node.
//  3. CertifiesReads tells the session whether to collect S keys for
//     t.Keys. Under dbsm they travel in the proposal; under pgr they would
//     stay at the origin, which alone certifies (the keys still go to
//     Terminate).
//  4. AppliedPrefix is read before a transaction's first snapshot-taking
//     statement (snapshot_seqno); SyncRead waits for the cluster's latest
//     commits to be applied locally.
//
// How the other protocols fit (DESIGN.md "Termination"):
//
//   - pgr: Terminate proposes {gid, rows} without read keys and keeps the
//     read keys at the origin; the delivery loop of the origin certifies
//     once every earlier outcome is known and proposes {gid, commit|abort};
//     other nodes apply the rows when that outcome is delivered, in the
//     order of the transactions' own seqnos. The session side is unchanged.
//   - cons: a protocol that also implements ClassScheduler. The session
//     calls Begin with the transaction's conflict classes before its first
//     statement; Begin proposes {gid, classes} and returns when the
//     transaction heads every class queue. Terminate proposes the write set
//     and never aborts for conflicts; the queues advance at apply.
type Protocol interface {
	Name() string
	CertifiesReads() bool
	AppliedPrefix() uint64
	SyncRead(ctx context.Context) error
	Terminate(ctx context.Context, t *Txn) (Outcome, error)
}

// Preparer is the optional capability of a protocol that wants to hear of
// a prepared transaction before its write set is decoded: the session
// calls Prepared right after PREPARE TRANSACTION and the returned func
// once it is done with the transaction (see Replica.Prepared).
type Preparer interface {
	Prepared(gid txn.GID) (forget func())
}

// ClassScheduler is the optional capability of a conservative protocol
// (cons): transactions wait for their conflict classes before they run.
type ClassScheduler interface {
	Begin(ctx context.Context, gid txn.GID, classes []txn.ClassRef) error
}

var (
	_ Protocol = (*Replica)(nil)
	_ Preparer = (*Replica)(nil)
)
