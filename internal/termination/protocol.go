package termination

import (
	"context"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
)

// Protocol names, as node.yaml spells them and entries carry them.
const (
	DBSM   = "dbsm"
	DBSMSI = "dbsm-si"
	PGR    = "pgr"
	CONS   = "cons"
	// DBSMRC is for READ COMMITTED applications: transactions run at the
	// level the client asks (READ COMMITTED by default) and are
	// certified for write-write conflicts only, against the prefix
	// committed when they end (docs/protocols.md).
	DBSMRC = "dbsm-rc"
)

// Protocol is a termination protocol as a session sees it. The delivery
// engine (internal/replica) implements it for every protocol; the
// protocols differ only in their decider.
//
// Contract:
//
//  1. A session calls Terminate once per update transaction, after
//     PREPARE TRANSACTION t.GID succeeded and its write set was decoded.
//     Terminate returns the outcome once the protocol has decided it; the
//     protocol, not the session, runs COMMIT PREPARED or ROLLBACK PREPARED,
//     in delivery order with every other transaction.
//  2. An error from Terminate means the outcome is not known to the
//     session (ErrUnknownOutcome), the transaction was never replicated
//     and the session must roll it back (ErrTooLarge, ErrNotReplicated),
//     or the node refuses updates (ErrInconsistent); for an unknown
//     outcome the protocol still resolves the prepared transaction the
//     same way on every node.
//  3. CertifiesReads tells the session whether to collect S keys for
//     t.Keys of every transaction. Under dbsm they travel in the proposal;
//     under pgr they stay at the origin, which alone certifies (the keys
//     still go to Terminate). Under dbsm-si and dbsm-rc only a transaction
//     that ran at SERIALIZABLE has them, with t.Serializable set.
//  4. AppliedPrefix is read before a transaction's first snapshot-taking
//     statement (snapshot_seqno); SyncRead waits for the cluster's latest
//     commits to be applied locally.
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
// once it is done with the transaction.
type Preparer interface {
	Prepared(gid txn.GID) (forget func())
}

// Notifier is the optional capability of a protocol engine that sends the
// notifications of a transaction that replicates nothing else (an
// autocommit NOTIFY, NOTIFYs in a read-only transaction) to every other
// node: Notify returns once they are ordered; an error means they may
// reach the other nodes or not.
type Notifier interface {
	Notify(ctx context.Context, ns []capture.Notification) error
}

// VisiblePrefixer is the optional capability of a protocol engine that
// knows which commits a local statement may see: dbsm-rc's sessions
// certify against it.
type VisiblePrefixer interface {
	VisiblePrefix(ctx context.Context) uint64
}

// ToldAwaiter is the optional capability of a protocol engine that tells
// a session its commit before the commit is visible in PostgreSQL (once it
// is durable: prepared, and decided in the order): AwaitTold returns once
// every commit told before the call is visible, and a session calls it
// before any statement that may take a snapshot, so that what a client
// sees after hearing of a commit holds it. A wait ends with
// ErrClientCanceled once canceled is closed (the client sent a
// CancelRequest: PostgreSQL, to which it is forwarded, runs nothing of the
// session's to cancel), and with ErrBruteForced once aborted is closed
// (the node chose the session's transaction for a brute-force abort: it
// holds locks an apply needs, and the wait must not outlast them).
type ToldAwaiter interface {
	AwaitTold(ctx context.Context, canceled, aborted <-chan struct{}) error
}

// ClassScheduler is the optional capability of a conservative protocol
// (cons): transactions wait for their conflict classes before they run.
//
//  1. Begin proposes gid with the classes it declares and returns once it
//     holds them (every earlier transaction holding a conflicting class
//     is carried out here), or with an error (ctx ended: its abort is
//     ordered, so it holds nothing).
//  2. The transaction ends with Terminate (its commit releases the
//     classes) or, when it ends otherwise (read-only, rolled back, its
//     session gone), with End, which releases them through the order.
type ClassScheduler interface {
	Begin(ctx context.Context, gid txn.GID, classes []txn.ClassRef) error
	End(gid txn.GID)
}

// LabelAborter is the optional capability of a protocol engine that
// records, through the order, that the labelled transaction a client asked
// to commit ended without its commit reaching the order (its statement or
// PREPARE failed, a conflict aborted it here): gid is a new GID, never
// prepared, and the outcome check then answers "aborted" for label where
// it answered "unknown" for good.
type LabelAborter interface {
	AbortLabelled(gid txn.GID, label string)
}

// Txn is a prepared transaction to terminate.
type Txn struct {
	GID           txn.GID
	Origin        uint32
	SnapshotSeqno uint64
	Keys          []txn.KeyMode
	ReadAll       bool
	// Serializable: it ran at SERIALIZABLE, and under dbsm-si and dbsm-rc
	// its reads are certified too (its Keys hold them as S).
	Serializable  bool
	WriteSet      *capture.WriteSet
	DDL           []string
	DDLSettings   [][]capture.Setting // per DDL statement, the settings it ran under (nil: none)
	DDLRowsBefore []int               // per DDL statement, how many of the write set's rows it ran after
	SearchPath    string
	Label         string // the client's name for it (SET ordo.txn_label), or ""
	// BeginSeqno is, under cons, the seqno of its BeginEntry (set by the
	// engine).
	BeginSeqno uint64
	// GranuleSeqno is the granule epoch its keys were computed under
	// (catalog.Catalog.GranuleSeqno).
	GranuleSeqno uint64
}

// Outcome is the fate of a terminated transaction.
type Outcome struct {
	Commit bool
	Seqno  uint64
	Reason string // why it aborted
	// Unordered: it aborted because its entry was not ordered in time
	// (its abort was ordered first), not for a conflict.
	Unordered bool
}
