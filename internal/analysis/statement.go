package analysis

import (
	"errors"
	"fmt"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

// Kind classifies a statement by what the session must do with it.
type Kind uint8

// Statement kinds.
const (
	// KindEmpty is an empty statement (only comments or semicolons).
	KindEmpty Kind = iota
	// KindRead is a read-only query (SELECT, VALUES, TABLE, DECLARE CURSOR
	// over a read-only query, SHOW-free).
	KindRead
	// KindWrite changes rows or takes row locks: INSERT (with ON CONFLICT),
	// UPDATE, DELETE, MERGE, data-modifying CTEs, SELECT … FOR UPDATE/SHARE.
	KindWrite
	// KindDDL is a utility statement replicated in total order (CREATE,
	// ALTER, DROP, TRUNCATE, GRANT, COMMENT, SELECT INTO, REFRESH …).
	KindDDL
	// KindTxn is transaction control; Statement.Txn says which.
	KindTxn
	// KindRefused must be refused with Statement.Err (client-issued
	// two-phase commit: Ordo owns PREPARE TRANSACTION).
	KindRefused
	// KindSession changes or shows session state only (SET, RESET, SHOW,
	// DISCARD, PREPARE, DEALLOCATE, FETCH, CLOSE, SET CONSTRAINTS).
	KindSession
	// KindNotify is LISTEN, UNLISTEN or NOTIFY.
	KindNotify
	// KindLock is LOCK TABLE; Statement.Locks names the tables.
	KindLock
	// KindCopyFrom is COPY … FROM (writes Statement.Writes).
	KindCopyFrom
	// KindCopyTo is COPY … TO (a read).
	KindCopyTo
	// KindOpaque runs code the analyzer cannot see into (CALL, DO, EXECUTE,
	// a query calling a function that may write): it may read and write
	// anything. Statement.Reason says why.
	KindOpaque
	// KindExplain is EXPLAIN without ANALYZE: it plans, reads no data.
	KindExplain
	// KindLocal is maintenance of the local server that is not replicated
	// (VACUUM, ANALYZE, CHECKPOINT, CLUSTER, REINDEX, LOAD, ALTER SYSTEM),
	// and the creation of temporary tables.
	KindLocal
)

var kindNames = [...]string{"empty", "read", "write", "ddl", "txn", "refused", "session", "notify", "lock", "copy-from", "copy-to", "opaque", "explain", "local"}

// String returns the kind's lowercase name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// TxnOp is a transaction-control operation.
type TxnOp uint8

// Transaction-control operations.
const (
	TxnBegin    TxnOp = iota + 1 // BEGIN, START TRANSACTION
	TxnCommit                    // COMMIT, END
	TxnRollback                  // ROLLBACK, ABORT
	TxnSavepoint
	TxnRelease
	TxnRollbackTo
	TxnSetTransaction   // SET TRANSACTION …
	TxnPrepare          // PREPARE TRANSACTION (refused)
	TxnCommitPrepared   // COMMIT PREPARED (refused)
	TxnRollbackPrepared // ROLLBACK PREPARED (refused)
)

var txnOpNames = [...]string{"", "begin", "commit", "rollback", "savepoint", "release", "rollback-to", "set-transaction", "prepare-transaction", "commit-prepared", "rollback-prepared"}

// String returns the operation's name.
func (o TxnOp) String() string {
	if int(o) < len(txnOpNames) {
		return txnOpNames[o]
	}
	return fmt.Sprintf("txnop(%d)", uint8(o))
}

// TxnControl details a KindTxn (or refused two-phase) statement.
type TxnControl struct {
	Op TxnOp
	// Isolation is "serializable", "repeatable read", "read committed" or
	// "read uncommitted" when the statement sets it, else "".
	Isolation string
	// ReadOnly is +1 for READ ONLY, -1 for READ WRITE, 0 when not given.
	ReadOnly   int8
	Deferrable int8
	Chain      bool   // COMMIT/ROLLBACK AND CHAIN
	Savepoint  string // SAVEPOINT, RELEASE, ROLLBACK TO
	GID        string // the client's PREPARE TRANSACTION / … PREPARED name
	// ConflictClasses and Profile come from a leading comment on BEGIN:
	//   /* ordo.conflict_classes='district[w=1], stock' ordo.profile=neworder */ BEGIN
	ConflictClasses string
	Profile         string
}

// Setting details SET, RESET and SHOW.
type Setting struct {
	Name  string // lowercased, e.g. "search_path", "ordo.conflict_classes"; "all" for RESET ALL / SHOW ALL
	Value string // SET: the value as text (list items joined by ", "); "" for DEFAULT
	// Values are the SET's list items as PostgreSQL holds them (an
	// identifier folded to lower case unless quoted, a string as
	// written).
	Values []string
	Local  bool // SET LOCAL
	Reset  bool // RESET or SET … TO DEFAULT
	Show   bool
	// Ordo marks an "ordo.*" setting, which Ordo interprets itself.
	Ordo bool
}

// Statement is the analysis of one SQL statement. It is immutable and shared
// by every session that runs the same text: call Bind for the keys.
type Statement struct {
	// SQL is the statement's text (with leading comments), Offset its byte
	// offset in the string given to Analyze.
	SQL    string
	Offset int
	Kind   Kind
	// Tag is the parse node name ("SelectStmt", "CreateStmt", …).
	Tag string
	// FastDefaults: the columns an ALTER TABLE adds with a default that
	// is not a constant, whose value for the existing rows the node that
	// ran it must read and the others replay as a constant
	// (LiteralDefaults).
	FastDefaults []string
	// FastDefaultsTable is the table, as written (Schema "" unqualified).
	FastDefaultsTable catalog.Name
	// Materializes: the materialized view (as written) the statement
	// fills from its query (CREATE MATERIALIZED VIEW, REFRESH). Its rows
	// are not replicated: every node computes them, at its own point of
	// the order, so the statement must conflict with every concurrent
	// write to the tables the query reads (the session adds X keys on
	// them once it ran).
	Materializes catalog.Name
	// KeptTag: the statement recreates an object of Ordo's that every
	// node has (CREATE EVENT TRIGGER ordo_…, in a dump taken through a
	// node): the session answers it with this tag and a notice, keeping
	// the node's own, where the statement alone would fail ("already
	// exists"). KeptNotice is that notice.
	KeptTag, KeptNotice string
	// RefusedCode is the SQLSTATE of a KindRefused statement's error (""
	// for 0A000, feature_not_supported).
	RefusedCode string
	// Reason explains KindRefused and KindOpaque, and any escalation to
	// "read everything".
	Reason string
	// TempNamespace: it creates a temporary table (CREATE TEMP TABLE,
	// CREATE TEMP TABLE … AS, SELECT … INTO TEMP), or would (IF NOT
	// EXISTS of one that exists): PostgreSQL then counts the transaction
	// as one that touched temporary objects, which it cannot prepare,
	// even when the statement did nothing.
	TempNamespace bool
	// Unparsed marks a KindOpaque statement that stands in for text that
	// failed to parse (ErrSyntax): PostgreSQL's grammar refuses it too.
	Unparsed bool
	Txn      *TxnControl // KindTxn and refused two-phase statements
	Setting  *Setting    // SET / RESET / SHOW
	// BlockOnly names a statement PostgreSQL runs only in a transaction
	// block ("LOCK TABLE", "DECLARE CURSOR" without HOLD): in the
	// implicit transaction of an extended-protocol batch it refuses it.
	BlockOnly string
	// WarnsOutsideBlock names a statement PostgreSQL runs outside a
	// transaction block with a warning ("SET LOCAL", "SET TRANSACTION",
	// "SET CONSTRAINTS"): in the implicit transaction of an
	// extended-protocol batch it warns "… can only be used in
	// transaction blocks".
	WarnsOutsideBlock string
	// Cursor is the name a DECLARE gives its cursor: a portal of that
	// name, which the protocol's Execute runs too.
	Cursor string
	// NoBlock names a statement PostgreSQL never runs in a transaction
	// block ("DISCARD ALL", "VACUUM", "ALTER SYSTEM", "CREATE DATABASE",
	// …): in the implicit transaction of an extended-protocol batch,
	// after another statement ran, it refuses it as run within a
	// pipeline.
	NoBlock string
	// Explain is set for EXPLAIN; Executes is false only for an EXPLAIN
	// without ANALYZE (which runs nothing).
	Explain  bool
	Executes bool
	// Prepared is the analysis of the query of a SQL-level PREPARE, and
	// PreparedName the name it prepares it under.
	Prepared     *Statement
	PreparedName string
	// Deallocates is the name a DEALLOCATE of one prepared statement
	// frees (as PostgreSQL folds it); FreesAll is set for DEALLOCATE ALL
	// and DISCARD ALL, which free every one. DiscardsAll is set for
	// DISCARD ALL, which also resets every setting.
	Deallocates           string
	FreesAll, DiscardsAll bool
	// Reads, Writes and Locks are the tables read, possibly written and
	// row-locked (sorted, deduplicated). Writes includes INSERT … ON CONFLICT
	// targets, data-modifying CTEs, COPY FROM and TRUNCATE targets, and the
	// base tables of views written through.
	Reads, Writes, Locks []catalog.Name
	// ReadsAll / WritesAll: the statement may read / write anything.
	ReadsAll, WritesAll bool
	// Unknown lists relation and function names the catalog did not know
	// (each caused an escalation).
	Unknown []string
	// UnknownRelations are the relations among Unknown, as written
	// (Schema empty when unqualified).
	UnknownRelations []catalog.Name
	// DDLTargets are the relations a DDL statement creates, changes, drops
	// or references (KindDDL), schema-qualified; certification takes X on
	// each.
	DDLTargets []catalog.Name
	// Rewrite, if set, is the text to run in place of SQL (a concurrent
	// index build or drop runs as a plain one), and Notice tells the
	// client why.
	Rewrite, Notice string
	// RewriteInBlock: the rewrite holds inside a transaction block too
	// (UNLOGGED made logged); without it a rewrite is for statements
	// PostgreSQL refuses in a block, run outside one. A statement whose
	// rewrite cannot be run (a query string of several statements) is
	// refused rather than run as sent.
	RewriteInBlock bool
	// NoEventTrigger: PostgreSQL fires no event trigger for this DDL
	// statement (TRUNCATE, roles, databases, tablespaces, parameters,
	// event triggers, and GRANT, COMMENT, SECURITY LABEL, RENAME or OWNER
	// TO on those), so nothing in the write set proves it ran.
	NoEventTrigger bool
	// Replay, if set, is what the other nodes run in place of what ran
	// here: CREATE TABLE … AS and SELECT … INTO create their table WITH
	// NO DATA there, as the rows travel in the write set.
	Replay string
	// SetsSequence: the statement calls setval. Sequence changes are not
	// decoded, so the session replicates the sequences' new state at
	// commit; such a statement makes an update transaction.
	SetsSequence bool
	// SetsOrdoConfig: the statement calls set_config on one of Ordo's
	// settings (ordo.read_consistency, …), on default_transaction_isolation,
	// or on a setting whose name is not a constant; the session reads them
	// from PostgreSQL again.
	SetsOrdoConfig bool
	// SetsSearchPath: the statement calls set_config on search_path, role
	// or session_authorization, or on a setting whose name is not a
	// constant: the names of statements after it may resolve otherwise.
	SetsSearchPath bool
	// LargeObjects: the statement calls a function on large objects
	// (lo_open, loread, lo_get, …); WritesLargeObjects: one that changes
	// one (lo_creat, lowrite, lo_unlink, …), which makes it an update.
	// Logical decoding does not carry large objects, so the session reads
	// the state its transaction left them in at commit and replicates
	// that; a protocol that certifies reads takes the statement for a
	// read of every large object.
	LargeObjects, WritesLargeObjects bool
	// NumParams is the highest $n used.
	NumParams int
	// Notify is the notification a NOTIFY statement sends.
	Notify *Notification
	// NotifyCall is set for SELECT pg_notify(…) (notifycall.go): its
	// Rewrite runs in its place, and the session sends the notification.
	NotifyCall *NotifyCall
	// GranuleSeqno is the granule epoch of the catalog it was analyzed
	// under (catalog.Catalog.GranuleSeqno): its granule keys are of that
	// configuration.
	GranuleSeqno uint64
	// CatalogVersion and Env are the catalog version (catalog.Catalog.Version)
	// and the search path (Env.Key) it was analyzed under; 0 and "" for a
	// statement the analyzer did not make. PostgreSQL analyzes a prepared
	// statement again when either changed: so must a session.
	CatalogVersion uint64
	Env            string

	acc    []access
	static *Footprint // set when no key depends on a parameter
	limit  int
	// pinned are the locations of literals whose whole text the analysis
	// depends on (array literals of = ANY): a template (template.go)
	// matches only texts where they are the same.
	pinned []int32
}

// Footprint is what a statement touches once its parameters are known.
type Footprint struct {
	// All: the statement may read everything; Reads is then empty.
	All bool
	// Reads are the S keys of the rows, granules or tables it reads.
	Reads []txn.Key
	// WritesAll: it may write anything.
	WritesAll bool
	// Writes predicts what it writes (row keys when the statement fixes
	// them, else granule or table keys). The real write set comes from
	// decoding; this prediction is for conflict classes.
	Writes []txn.Key
}

// ErrRefused is returned by Statement.Err for KindRefused statements.
var ErrRefused = errors.New("statement refused by ordo")

// Err returns an error wrapping ErrRefused with the reason for a refused
// statement, nil otherwise.
func (s *Statement) Err() error {
	if s.Kind != KindRefused {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRefused, s.Reason)
}

// Updates reports whether the statement makes the transaction an update
// transaction that must be terminated through the replication protocol.
func (s *Statement) Updates() bool {
	switch s.Kind {
	case KindWrite, KindDDL, KindCopyFrom, KindOpaque:
		return s.Executes
	}
	return false
}

// Notification is what a NOTIFY sends: its channel and payload.
type Notification struct {
	Channel, Payload string
}
