package termination

import "github.com/ordo-db/ordo/internal/txn"

// Decider is the deterministic heart of a termination protocol: fed the
// delivered sequence one entry at a time, it says which transactions are
// decided, how, and in what commit order. The delivery engine
// (internal/replica) owns every side effect and drives a decider the way
// etcd's raft core is driven by its caller:
//
//  1. Decode the entry delivered at seqno s into an Entry (with, for a
//     transaction a restarted node already decided, the outcome its proof
//     rows give).
//  2. Step(entry): the decider updates its state and returns a Step.
//  3. Forget the payloads of Step.Expired; keep the entry's payload if
//     Step.Hold.
//  4. Carry out Step.Decisions in the order given: COMMIT PREPARED or
//     ROLLBACK PREPARED for the node's own transactions, applies for the
//     others'; then answer the waiting sessions.
//  5. Propose Step.Proposals (outcome entries), in the background, until
//     the order takes them; whether they win is the sequence's business.
//  6. Publish min(s, Settled()) as the applied prefix once everything up
//     to it is carried out.
//
// Step must be deterministic: two deciders of the same protocol fed the
// same entries return the same Decisions, whatever node they run on,
// whatever the time. Only Proposals may differ between nodes: they come
// from what the node alone knows (under pgr, its own transactions' read
// keys, Entry.Local), and they become decisions only once delivered. A decider never blocks and never does I/O; it is not safe for
// concurrent use (the engine's delivery loop is its only caller).
type Decider interface {
	// Step feeds the entry delivered at e.Seqno. Entries arrive in
	// seqno order, each once. An error means the node cannot decide
	// like the others (an entry of another protocol): it must stop.
	Step(e *Entry) (Step, error)
	// Settled returns the largest seqno s such that every entry up to s
	// is decided and its decision was returned by Step.
	Settled() uint64
}

// Drainer is the optional capability of a decider that can hold
// transactions undecided (pgr): when the cluster switches protocols, Drain
// decides every one of them (abort), and returns every decision it still
// held, in commit order. The decider is not used after.
type Drainer interface {
	Drain() []Decision
}

// Kind is what a delivered entry is, as far as deciders care.
type Kind uint8

// Kinds of delivered entries.
const (
	// KindTxn is a transaction's keys and rows (its TxnEntry).
	KindTxn Kind = iota + 1
	// KindAbort says the transaction's origin gave up on it (AbortEntry):
	// the first outcome delivered wins.
	KindAbort
	// KindFragment is part of the rows of a transaction too large for
	// one entry; its TxnEntry follows.
	KindFragment
	// KindOther is an entry no protocol decides on (schema checks).
	KindOther
	// KindOutcome decides a transaction delivered earlier (pgr's
	// OutcomeEntry): the first outcome delivered for it wins.
	KindOutcome
	// KindBegin starts a cons transaction with its conflict classes
	// (BeginEntry).
	KindBegin
)

// Replay is the outcome a restarted node's proof rows give for an entry
// it decided before it restarted.
type Replay uint8

// Replay outcomes.
const (
	ReplayNone   Replay = iota // not decided before a restart: decide it
	ReplayCommit               // it committed here before the restart
	ReplayAbort                // it aborted before the restart
)

// Entry is a delivered entry, decoded, as a decider sees it: no rows, only
// what decisions depend on.
type Entry struct {
	Seqno uint64
	Kind  Kind
	GID   txn.GID
	// KindTxn only.
	Origin        uint32
	Protocol      string
	SnapshotSeqno uint64
	Keys          []txn.KeyMode
	ReadAll       bool
	// Serializable: its origin ran it at SERIALIZABLE; dbsm-si and dbsm-rc
	// certify its reads (S keys, ReadAll) as dbsm certifies every
	// transaction's.
	Serializable bool
	Fragments    uint32 // fragments delivered before it
	// BeginSeqno is, under cons, the seqno of its BeginEntry.
	BeginSeqno uint64
	// GranuleSeqno is the granule epoch its origin computed its keys
	// under, GranulesInForce the one in force at its delivery (the same on
	// every node: classes.GranuleSeqnoAt), for GranulesStale.
	GranuleSeqno, GranulesInForce uint64
	// Local is, on the transaction's origin only, what the origin alone
	// knows of it (under pgr, its read keys); nil elsewhere, and on an
	// origin that restarted since it proposed the transaction.
	Local *Local
	// Replayed, when not ReplayNone, is the outcome the node's proof rows
	// give: the decider takes it instead of deciding anew, and updates
	// its state as if it had decided so.
	Replayed Replay
	// KindFragment only: its index among the transaction's fragments.
	Index uint32
	// KindOutcome only: the seqno of the transaction's TxnEntry, whether
	// it commits, and why not.
	TxnSeqno uint64
	Commit   bool
	Reason   string
	Cause    Cause
	// Conflict is the key a certification abort conflicted on (Level 0:
	// none).
	Conflict txn.Key
	// KindBegin only: the classes the transaction declared (its Origin
	// is set too).
	Classes []txn.ClassRef
}

// Local is what a transaction's origin knows of it beyond its entry.
type Local struct {
	// Keys are every key of the transaction with its modes, reads (S)
	// included; ReadAll marks a read the origin could not attribute.
	Keys    []txn.KeyMode
	ReadAll bool
}

// Step is what a decider made of one entry.
type Step struct {
	// Decisions, in commit order.
	Decisions []Decision
	// Hold: the entry is a fragment whose transaction may still commit:
	// the engine keeps its payload until the transaction is decided.
	Hold bool
	// Expired lists transactions whose held fragments can no longer be
	// used (their TxnEntry, if it ever comes, aborts): the engine forgets
	// them.
	Expired []txn.GID
	// Proposals are outcomes this node must propose (pgr: the origin's
	// certification of its own transaction).
	Proposals []Proposal
	// Granted are transactions that now hold every class they declared
	// (cons): their origin's session may run them. Granted after the
	// Decisions of the same step are carried out.
	Granted []txn.GID
}

// Proposal is an outcome a node proposes for a delivered transaction.
type Proposal struct {
	GID      txn.GID
	TxnSeqno uint64
	Commit   bool
	Reason   string
	Cause    Cause
	// Conflict is the key a certification abort conflicted on.
	Conflict txn.Key
}

// Decision is the fate of one transaction.
type Decision struct {
	GID    txn.GID
	Origin uint32
	// Seqno is the transaction's place in the commit order, the seqno of
	// its TxnEntry; 0 for an abort decided before the TxnEntry was
	// delivered (its origin's AbortEntry came first): the engine rolls
	// back the origin's prepared transaction and forgets its fragments,
	// and the TxnEntry, should it come, is decided abort again.
	Seqno  uint64
	Commit bool
	// Reason says why it aborted, for the client.
	Reason string
	// Cause names the rule that decided an abort, for metrics.
	Cause Cause
	// Conflict is the key a certification abort conflicted on (Level 0:
	// none), for the hottest-conflicts view.
	Conflict txn.Key
}

// Cause names the rule that decided a transaction's abort.
type Cause string

// Causes of aborts.
const (
	CauseNone          Cause = ""                // it committed
	CauseCertification Cause = "certification"   // a conflict with a transaction not in its snapshot
	CauseTooOld        Cause = "too_old"         // its snapshot, or its first fragment, is older than the certification window
	CauseOriginAbort   Cause = "origin_abort"    // its origin gave up, and its abort was ordered first
	CauseOriginGone    Cause = "origin_gone"     // pgr: its origin failed, or restarted, before it proposed an outcome
	CauseSwitch        Cause = "protocol_switch" // the cluster switched protocols before it was decided
	CauseReplayed      Cause = "replayed"        // decided before this node restarted (not counted again)
	CauseGranules      Cause = "granules"        // the granule columns of the conflict classes changed while it ran
)

// GranulesStale returns why a transaction's keys cannot be certified under
// the granule configuration in force at its delivery, or "". dbsm and pgr
// give reads and writes that fix a split class's column granule keys (a
// write takes IX on its row's granule, a read of the granule S); that is
// sound only if every transaction it is certified against computed its
// keys under the same granule columns: its own keys must be of the epoch
// in force, and if it has granule keys, its snapshot must be no older than
// that epoch (every transaction committed after its snapshot then has
// granule keys too). Such aborts happen only around a change of the
// classes' granule columns.
func (e *Entry) GranulesStale() string {
	if e.GranuleSeqno != e.GranulesInForce {
		return "the granule columns of the conflict classes changed while it ran"
	}
	if e.SnapshotSeqno >= e.GranulesInForce {
		return ""
	}
	has := func(keys []txn.KeyMode) bool {
		for _, k := range keys {
			if k.Key.Level == txn.LevelGranule {
				return true
			}
		}
		return false
	}
	if has(e.Keys) || (e.Local != nil && has(e.Local.Keys)) {
		return "its snapshot is older than the granule columns of the conflict classes its keys use"
	}
	return ""
}
