package wire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// Hooks lets a session layer (replication) observe and steer every client
// session without touching the wire code. A nil Hooks makes the Server a plain
// transparent proxy.
type Hooks interface {
	// NewSession is called once per client session, after PostgreSQL has
	// accepted the client's authentication and sent its first ReadyForQuery,
	// before that ReadyForQuery is relayed to the client. It runs on the
	// session goroutine and may call be.Exec (for example to set session
	// characteristics). Returning an error closes the session with that error
	// as a FATAL ErrorResponse.
	NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error)
}

// SessionHooks receives the events of one client session.
//
// Contract:
//
//  1. Calls into one SessionHooks value are serialized: no two of its methods
//     ever run at the same time. Different sessions run concurrently.
//  2. Statement and Close are called on the session goroutine (the goroutine
//     that reads the client connection). Statement is called for every Query,
//     Parse, Bind and Close(statement) message, in client order, before the
//     message is sent to PostgreSQL. Messages that follow a rejected message
//     up to the next Sync are not reported (PostgreSQL would skip them).
//  3. ReadyForQuery is called once per ReadyForQuery PostgreSQL sends for the
//     client's messages, in order, after PostgreSQL sent it. It is called on
//     the backend goroutine (the goroutine that reads PostgreSQL) if no other
//     method is running, otherwise on the session goroutine right after the
//     running Statement returns; either way never concurrently with another
//     method (rule 1). Because client messages may be pipelined, Statement
//     calls for later messages may come before the ReadyForQuery of earlier
//     ones. It must not block and must not call Exec. The ReadyForQuery
//     replies to the hook's own Exec calls are not reported.
//  4. Statement may call Backend.Exec to run its own statements on the
//     session's PostgreSQL connection; see Backend.Exec for when that is
//     allowed. Their replies go to the hook, never to the client.
//  5. If Statement returns a non-nil error, the message is not sent to
//     PostgreSQL. Instead PostgreSQL is made to fail at exactly that point
//     (so an open transaction becomes failed, as it would for a real error),
//     and the client receives the error as an ErrorResponse in its place: a
//     *pgconn.PgError is sent with its fields, ErrNotAtBoundary (wrapped
//     or not) as 0A000 with a message telling the client to send the
//     statement after a Sync, any other error as SQLSTATE XX000 with
//     err.Error() as the message. The client still receives the
//     ReadyForQuery of its next Sync (or of the rejected Query).
//  6. The Statement and its byte slices are only valid during the call.
//  7. Close is called exactly once when the session ends, after every other
//     call has returned.
type SessionHooks interface {
	Statement(ctx context.Context, st *Statement) error
	ReadyForQuery(txStatus byte)
	Close()
}

// PortalWatcher is implemented by SessionHooks that set
// Statement.WatchExecute. Executed is called on the session goroutine, under
// rule 1, when the client's Execute of portal is sent to PostgreSQL (not
// one Ordo answers itself, and not one after a message of the batch the
// hooks refused: PostgreSQL skips those). It must not block or Exec; a
// Backend.Warn or Unwarn it makes edits the Execute's replies.
// PostgreSQL may still skip it (an error earlier in the batch) or fail it
// (the portal was closed, or ran already): the error then fails the
// transaction, or the subtransaction a ROLLBACK TO undoes, which is where
// the hooks must have placed what they took to have run.
type PortalWatcher interface {
	Executed(portal string)
}

// StatementKind names the client message a Statement reports.
type StatementKind uint8

// The statement kinds, named after the protocol messages.
const (
	// KindQuery is a simple-protocol Query; SQL may hold several statements.
	KindQuery StatementKind = iota + 1
	// KindParse is an extended-protocol Parse: Name is the prepared
	// statement ("" = unnamed), SQL its text, ParamOIDs the declared types.
	KindParse
	// KindBind is a Bind: Portal, Name (the prepared statement), Params and
	// their formats.
	KindBind
	// KindCloseStatement is a Close of prepared statement Name.
	KindCloseStatement
	// KindFunctionCall is a FunctionCall (the fast-path interface):
	// Function, Params and their formats. Like a Query it is a unit of its
	// own, and runs in a transaction of its own outside a block.
	KindFunctionCall
)

// Statement is what the session layer sees of one client message.
type Statement struct {
	Kind          StatementKind
	SQL           string   // Query and Parse
	Name          string   // prepared statement name (Parse, Bind, CloseStatement)
	Portal        string   // Bind
	ParamOIDs     []uint32 // Parse
	Function      uint32   // FunctionCall: the function's OID
	ParamFormats  []int16  // Bind, FunctionCall: 0 text, 1 binary (see the protocol's Bind rules)
	Params        [][]byte // Bind, FunctionCall: nil element = SQL NULL
	ResultFormats []int16  // Bind
	// Rewrite may be set by Statement for a Query or a Parse: PostgreSQL
	// then receives this text in place of SQL. A SELECT in it whose one
	// row has one column ending with ShowMarker stands for a SHOW: the
	// client gets the value without the marker and the tag SHOW.
	Rewrite string
	// WatchExecute may be set by Statement for a Bind: the hooks are then
	// told (PortalWatcher.Executed) of every Execute of that portal name
	// the client sends until its transaction ends, whatever was bound to
	// it since (the hooks see every Bind, and whether PostgreSQL ran a
	// Bind, a Close or an Execute is known only from its replies). The
	// session acts on a statement at its Bind, PostgreSQL runs it at its
	// Execute: a statement nothing else proves ran (a role's) waits for
	// this.
	WatchExecute bool
	// Replaced, with the Rewrite of a Query, says which parts of SQL it
	// replaced, in order: PostgreSQL's error positions in the rewritten
	// text are made the client's (nil: they are left as they are).
	Replaced []Replaced
	// Piece and Pieces: a Query the hooks split (Split) is reported
	// piece by piece, Piece counting from 1; 0 for a Query sent whole.
	Piece, Pieces int
	// AtBoundary: the message begins a unit (a Query, or the first
	// message after a Sync) and PostgreSQL has answered every earlier
	// one, its ReadyForQuery reported: the hooks may Exec. A message that
	// begins a unit while earlier ones are unanswered (a client
	// pipelining across Syncs) waits for them first, so that the hooks
	// see it at a transaction boundary.
	AtBoundary bool
	// Unit counts the units the session has begun: the first Statement
	// of a unit is the first with a new Unit, whether or not it is
	// AtBoundary (a unit may begin with a message the hooks do not see,
	// a Describe or an Execute).
	Unit uint64
}

// Backend is the session's PostgreSQL connection as the hooks see it.
type Backend interface {
	// Exec runs sql (simple protocol, may hold several statements) on the
	// session's PostgreSQL connection and returns its replies, which are not
	// relayed to the client (NotificationResponse and ParameterStatus still
	// are). It may only be called from Hooks.NewSession and
	// SessionHooks.Statement. It first waits until PostgreSQL has answered
	// every message already sent for the client (a transaction boundary:
	// the last one was a Sync or a Query and its ReadyForQuery arrived).
	// If the client is inside an unfinished extended-protocol batch (messages
	// sent without a Sync yet) or a COPY, or if called from ReadyForQuery,
	// it returns ErrNotAtBoundary.
	// An error PostgreSQL reports is in Result.Err, not the returned error;
	// the returned error means the connection is unusable or ctx ended.
	//
	// more are statements run after sql in the same round trip, as in
	// one query string (after an error the rest is skipped). Each must be
	// one statement while the client holds an unnamed statement: they
	// then run with the extended protocol under names of Ordo's, which
	// leave it (and the unnamed portal) as they are. (A simple query
	// would destroy it, and parsing it again fails, in the transaction,
	// if what it names is gone.) Otherwise they run as one query string.
	Exec(ctx context.Context, sql string, more ...string) (*Result, error)
	// ExecAbortable is Exec of one statement of the client's that the
	// hooks run again (an autocommit statement retried after a
	// conflict): like the client's own statements, and unlike Ordo's,
	// Abort cancels it (it takes row locks, and may block an apply).
	ExecAbortable(ctx context.Context, sql string) (*Result, error)
	// ExecBound is ExecAbortable of the client's prepared statement name
	// ("" the unnamed one), bound to params in formats and its results
	// in resultFormats (as in Bind) under a portal of Ordo's: the
	// extended-protocol statement of an autocommit unit, run again. It
	// leaves the statement as it is.
	ExecBound(ctx context.Context, name string, formats []int16, params [][]byte, resultFormats []int16) (*Result, error)
	// TxStatus is the transaction status of the last ReadyForQuery: 'I'
	// idle, 'T' in a transaction block, 'E' in a failed transaction block.
	TxStatus() byte
	// Abort makes the session's current transaction fail with err; it may
	// be called from any goroutine. A running statement is cancelled; a
	// transaction idle between statements is rolled back at once (its
	// locks are released) and replaced by a failed one, so the client's
	// view stays consistent. The client receives err in place of the next
	// error PostgreSQL reports in this transaction, and rolls back as after
	// any error. Outside a transaction it does nothing.
	Abort(err error)
	// Explain, called from SessionHooks.Statement, makes the next error
	// PostgreSQL raises with SQLSTATE code and message raised before the
	// unit's next ReadyForQuery reach the client with Ordo's message and
	// hint in place of PostgreSQL's (PostgreSQL's message goes before the
	// detail): for an error that running the statement through Ordo
	// causes and that PostgreSQL alone would not have raised.
	Explain(code, raised, message, hint string)
	// Warn, called from SessionHooks.Statement for a Query of one
	// statement or a Bind, gives the client a WARNING with SQLSTATE code
	// and message msg among the statement's replies, just before its
	// CommandComplete or its error (a Bind's: the portal's next
	// Execute's), where PostgreSQL sends a warning it raises while
	// running it; if the hooks answer the statement (Completed), just
	// before that answer. It is for a warning PostgreSQL would raise
	// without Ordo and does not as Ordo runs the statement: transaction
	// control in a block of Ordo's where PostgreSQL runs an implicit
	// transaction. If PostgreSQL skips the statement, or the hooks
	// refuse it, nothing is sent.
	Warn(code, msg string)
	// Unwarn, called as Warn, drops from the statement's replies
	// PostgreSQL's warning with SQLSTATE code and message msg: one it
	// raises as Ordo runs the statement and would not raise without
	// Ordo.
	Unwarn(code, msg string)
	// Notice sends the client a NoticeResponse (severity NOTICE) with msg;
	// notices are asynchronous in the protocol, so it may be called at any
	// time from the session goroutine.
	Notice(msg string)
	// HoldReady, called from SessionHooks.Statement, holds back the
	// ReadyForQuery that ends the current unit (the Query being reported,
	// or the next Sync) until the hooks' ReadyHolder.BeforeReady has run.
	HoldReady()
	// BeginHere, called from SessionHooks.Statement for a Parse or Bind
	// outside a transaction block, sends begin (a BEGIN statement) just
	// before the message, in the same round trip. For a message that is
	// not the first of its batch it makes the implicit transaction
	// PostgreSQL runs the batch in a transaction block: PostgreSQL
	// includes in it what the batch ran before. For the first message of
	// a unit it opens the block its statements run in (begin may name an
	// isolation level there: no snapshot was taken yet). Its replies are
	// not relayed, its error is (and then PostgreSQL skips the client's
	// messages up to the Sync, as after an error of theirs). The block
	// stays open at the batch's Sync (HoldReady and ReadyHolder end it).
	BeginHere(begin string)
	// SetHere, called from SessionHooks.Statement for a Parse or Bind
	// that is the first message of its unit, inside a transaction block
	// no statement of which has run yet, sends sql (SET TRANSACTION) just
	// before the message, in the same round trip, as BeginHere sends its
	// BEGIN: its replies are not relayed, its error is (and PostgreSQL
	// then skips the client's messages up to the Sync).
	SetHere(sql string)
	// ParseHere, called from SessionHooks.Statement for a Bind of the
	// unnamed statement, parses sql, with the parameter types the
	// client's Parse declared, as the unnamed statement just before the
	// Bind, in the same round trip, in place of the text the client's
	// Parse was rewritten to (Statement.Rewrite) when that rewrite no
	// longer holds where the statement runs. Its ParseComplete is not
	// relayed, its error is (and PostgreSQL then skips the client's
	// messages up to the Sync); Unnamed reports sql from then on, unless
	// PostgreSQL skipped it (an error earlier in the batch).
	ParseHere(sql string, types []uint32)
	// SyncHere, called from SessionHooks.Statement for a Parse or Bind
	// that is not the first message of its batch, sends PostgreSQL a Sync
	// of Ordo's before the message and waits for its ReadyForQuery (not
	// relayed; the hooks' ReadyForQuery runs for it before SyncHere
	// returns). The message is then at a boundary, as if it began a unit
	// of its own: the hooks may Exec. Inside a transaction block a Sync
	// ends nothing, so the client sees the batch as PostgreSQL runs it.
	// Before the Sync it sends a BEGIN of Ordo's (replies, warning and,
	// in a failed block, error not relayed), so that the Sync never
	// commits PostgreSQL's implicit transaction: what the batch ran so
	// far becomes a block, as BeginHere makes it. It returns
	// ErrNotAtBoundary, sending nothing, if a portal bound earlier in the
	// batch has not been executed yet (ending the transaction would
	// destroy it), if a refusal of the hooks is pending, or, having sent
	// them, if PostgreSQL turns out to be in COPY FROM STDIN (it ignores
	// the Sync there).
	// failed: a message before it failed, PostgreSQL skipped the rest,
	// and the message and what follows up to the client's Sync are
	// skipped too, as they would have been (the hooks are not at a
	// boundary, and are not called again before that Sync). Outside a
	// transaction block the Sync would commit the batch's implicit
	// transaction: the hooks call it only inside one.
	SyncHere(ctx context.Context) (failed bool, err error)
	// Failed, called from SessionHooks.Statement, waits for PostgreSQL's
	// replies to the messages of the batch sent so far and reports
	// whether one of them failed: PostgreSQL then skips the message being
	// reported, and the rest up to the client's Sync. At the first
	// message of a unit it reports false at once.
	Failed(ctx context.Context) (bool, error)
	// Begins counts the client's BEGINs PostgreSQL has executed
	// (CommandComplete "BEGIN"): comparing two counts tells whether one
	// ran in between.
	Begins() int64
	// InjectedBegins counts the BEGINs of BeginHere PostgreSQL executed
	// (one an earlier error of its batch made it skip is not counted).
	InjectedBegins() int64
	// BeginsSinceInjected counts the client's BEGINs PostgreSQL executed
	// after the last BEGIN of BeginHere it executed.
	BeginsSinceInjected() int64
	// TxRowsChanged counts the rows the client's INSERT, UPDATE, DELETE
	// and MERGE statements changed (their CommandComplete tags) since
	// PostgreSQL was last idle or ended a transaction (COMMIT, ROLLBACK,
	// or ROLLBACK TO SAVEPOINT, after which rows before the savepoint are
	// not counted): never more than the open transaction's.
	TxRowsChanged() int64
	// CancelRequested returns a channel closed when the client next sends
	// a CancelRequest for this session (after the call). Ordo forwards it
	// to PostgreSQL, which cancels what runs; what waits in Ordo itself
	// between statements (an autocommit retry's pause) watches this.
	CancelRequested() <-chan struct{}
	// UnitSentRows reports whether the unit being finished relayed rows or
	// a COPY to the client (RowDescription, DataRow, CopyInResponse,
	// CopyOutResponse), or a result HoldConflicts did not hold: what a
	// client may already have read of it. For ReadyHolder.BeforeReady.
	UnitSentRows() bool
	// ReplaceHeld, called from ReadyHolder.BeforeReady of a unit whose
	// last CommandComplete is held (HoldReady of a simple Query, or
	// HoldConflicts), makes the client receive the rows and the last tag
	// of res, the Result of ExecAbortable or ExecBound, in place of the
	// held ones (the statement was run again, and its rows and count may
	// differ), or neither if res is nil (a run that did not complete).
	ReplaceHeld(res *Result)
	// HoldConflicts, called from SessionHooks.Statement after HoldReady,
	// for a simple Query or the first message of an extended-protocol
	// unit, holds back an error of SQLSTATE 40001 or 40P01 that ends the
	// statement (PostgreSQL's, or Abort's) if no rows were relayed before
	// it: ReadyHolder.BeforeReady finds it in HeldConflict, and the client
	// receives it only if BeforeReady returns no error of its own and
	// replaces nothing (ReplaceHeld). The statement's rows are held too
	// (a Query's RowDescription and DataRows, an Execute's DataRows; a
	// Describe's RowDescription goes out), up to 1 MiB: beyond, they go
	// out, and UnitSentRows reports true. In an extended-protocol unit
	// it holds the last CommandComplete as HoldReady does a Query's (the
	// client receives it before an error of BeforeReady, as PostgreSQL
	// sends an Execute's completion before its commit's error at the
	// Sync), and holds any of these only if the client's Sync was sent
	// before it arrived: a client may wait for its results before
	// sending the Sync (a Flush), and then gets them at once
	// (UnitSentRows reports true).
	HoldConflicts()
	// HeldConflict is the error HoldConflicts held back, or nil. In an
	// extended-protocol unit only an error of its Execute followed by
	// nothing but the Sync is held (PostgreSQL skipped nothing the
	// client would miss the replies to).
	HeldConflict() error
	// HeldComplete reports, in ReadyHolder.BeforeReady, whether the
	// unit's last CommandComplete is held (HoldReady of a simple Query,
	// HoldConflicts): its statement completed, and the client has not
	// seen it.
	HeldComplete() bool
	// Unnamed returns the text PostgreSQL holds as the client's unnamed
	// prepared statement, and false if it holds none (or the session
	// cannot tell). Exact at the first message of a batch.
	Unnamed() (sql string, ok bool)
	// LastParsed returns the text of the client's last accepted Parse of
	// statement name (until a Close of it), which it still holds unless
	// SQL's DEALLOCATE, DISCARD or PREPARE changed it since.
	LastParsed(name string) (sql string, ok bool)
	// PortalPending reports whether the client bound portal earlier in
	// the batch being reported and has not executed or closed it since.
	PortalPending(portal string) bool
	// QueryFrees tells that the DEALLOCATEs of the Query of text sql,
	// the next message sent to PostgreSQL, free names, one each, in
	// order: their tags do not say which, and without this no name is
	// known after one (the session reads them again). Any other message
	// sent first cancels it.
	QueryFrees(sql string, names []string)
	// UnnamedParsedAs returns the text the client sent in its Parse of
	// the unnamed statement Unnamed reports, where the hooks rewrote it
	// (Statement.Rewrite), else "".
	UnnamedParsedAs() string
	// Named returns the text PostgreSQL holds as the client's prepared
	// statement name: exists false if it holds none, known false if the
	// session cannot tell (after SQL's PREPARE, DEALLOCATE or DISCARD in
	// a simple query, only names parsed since are known). Exact for a
	// name not parsed or closed earlier in the batch.
	Named(name string) (sql string, exists, known bool)
	// NonStandardStrings reports whether PostgreSQL last reported
	// standard_conforming_strings off: a backslash in a plain string
	// literal then escapes, as the analysis of a text does not read it.
	NonStandardStrings() bool
	// Declared returns the text PostgreSQL holds as the client's prepared
	// statement name ("" the unnamed one) and the parameter types its
	// Parse declared (0: a type left to PostgreSQL to infer), or those
	// LearnNamed was given; ok false if the session cannot tell. Exact
	// where Named and Unnamed are, for a name not parsed or closed
	// earlier in the batch: unlike the client's last Parse of the name,
	// which may have been refused or skipped.
	Declared(name string) (sql string, types []uint32, ok bool)
	// LearnNamed tells the session what PostgreSQL holds as the client's
	// named prepared statements (name to text, as pg_prepared_statements
	// shows them; fromSQL: those SQL's PREPARE made; types: the parameter
	// types PostgreSQL resolved), read by an Exec at the first message of
	// a unit: from then on Named knows every name again. A statement the
	// client's Parse made keeps the types that Parse declared.
	LearnNamed(names, fromSQL map[string]string, types map[string][]uint32)
	// NamedKnown reports whether Named knows every name (false after
	// SQL's PREPARE, DEALLOCATE or DISCARD, until LearnNamed).
	NamedKnown() bool
}

// Completed, returned by SessionHooks.Statement for a KindQuery, answers
// the query without PostgreSQL: the client receives a CommandComplete
// with each of Before, one with Tag, and ReadyForQuery with the current
// transaction status. No ReadyForQuery call follows for it at a boundary;
// inside an extended-protocol batch a Sync of Ordo's ends PostgreSQL's
// batch first, as the Query would have, and the hooks get that Sync's
// ReadyForQuery (whose status the client is given).
type Completed struct {
	Tag    string
	Before []string // the tags of the query's earlier statements
}

func (c *Completed) Error() string { return "wire: answered by the session: " + c.Tag }

// Split, returned by SessionHooks.Statement for a KindQuery (not itself a
// piece), makes the session run the query as consecutive pieces of its
// text, each sent to PostgreSQL as a Query of its own once the previous
// one is answered, so that the hooks act between them (a COMMIT in the
// middle of a string):
//
//  1. Statement is called for each piece (Piece, Pieces set) as for a
//     Query at a boundary: it may Exec, HoldReady, rewrite it, answer it
//     (Completed: the client receives only its CommandComplete) or refuse
//     it.
//  2. The client receives the replies of every piece but only the last
//     ReadyForQuery, as for one Query; ReadyForQuery is reported to the
//     hooks for every piece.
//  3. After a piece that failed (an ErrorResponse) or was refused, the
//     rest is not run, as PostgreSQL skips the rest of a string after an
//     error.
//  4. A held ReadyForQuery (HoldReady in any piece) is released after
//     the last piece run: ReadyHolder.BeforeReady runs once, then.
//  5. A COPY … FROM STDIN in a piece gets the client's data (up to its
//     CopyDone or CopyFail) while the piece waits for it, as a Query's
//     COPY does.
//
// The hooks own what splitting means for transactions (PostgreSQL runs a
// string's statements in one implicit transaction).
//
// Offsets, if set, are where each piece begins in the query string, in
// characters: PostgreSQL's error positions in a piece are made the
// client's, counted from its string's start.
type Split struct {
	Pieces  []string
	Offsets []int
}

func (s *Split) Error() string { return fmt.Sprintf("wire: split into %d pieces", len(s.Pieces)) }

// ReadyHolder is an optional interface of SessionHooks, used when a
// Statement call asked for HoldReady.
//
// Contract:
//
//  1. BeforeReady runs on the session goroutine once PostgreSQL has
//     answered every message of the held unit and its replies have been
//     relayed to the client, except the final ReadyForQuery. For a COPY
//     FROM STDIN started by the unit, that is after the client's CopyDone
//     or CopyFail.
//  2. It may call Backend.Exec (the backend is at a boundary).
//  3. A non-nil error is sent to the client as an ErrorResponse (see
//     SessionHooks rule 5 for the conversion); then the client receives
//     ReadyForQuery with the transaction status PostgreSQL reported last,
//     after the hooks' own Exec calls.
type ReadyHolder interface {
	BeforeReady(ctx context.Context) error
}

// Result is the reply to one Backend.Exec.
type Result struct {
	Tags     []string   // CommandComplete tags, in order
	Rows     [][]string // data rows of all statements, text format, nil = NULL (not of ExecAbortable or ExecBound: rows)
	Notices  []string   // NoticeResponse messages
	Err      error      // *pgconn.PgError if PostgreSQL reported an error
	TxStatus byte       // from the final ReadyForQuery
	// Aborted: Err is the query cancel of an Abort (its CancelRequest,
	// perhaps late), not one of PostgreSQL's own (a statement timeout
	// that fired as the previous statement ended, the client's cancel).
	Aborted bool
	// rows: of ExecAbortable and ExecBound, the RowDescription and
	// DataRows as PostgreSQL sent them (ReplaceHeld), which Rows leaves
	// out; RowsOver: more than a held statement may hold (1 MiB), kept
	// none.
	rows     []byte
	RowsOver bool
}

// ErrNotAtBoundary is returned by Backend.Exec when the client is in the
// middle of an extended-protocol batch or a COPY.
var ErrNotAtBoundary = errors.New("wire: not at a transaction boundary")

// ErrSessionClosed is returned by Backend.Exec when the session or its
// PostgreSQL connection has ended.
var ErrSessionClosed = errors.New("wire: session closed")

// SessionInfo describes a session to Hooks.NewSession.
type SessionInfo struct {
	ID         uint64            // unique within the Server
	RemoteAddr string            // client address
	User       string            // startup parameter "user"
	Database   string            // startup parameter "database" (defaults to User)
	Parameters map[string]string // all startup parameters as sent to PostgreSQL
	TLS        bool              // client connection uses TLS
}

// ShowMarker ends the one value of a rewritten statement that answers a
// SHOW (Statement.Rewrite): the relay takes it off the value and replaces
// the statement's tag (SELECT 1) with SHOW. It holds a random part, new
// in each process, so that no client's data can end with it by chance
// (or on purpose). In SQL: ShowMarkerSQL.
var ShowMarker, ShowMarkerSQL = showMarkers()

func showMarkers() (marker, sql string) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tag := "ordo:show:" + hex.EncodeToString(b[:])
	return "\x1f" + tag + "\x1f", "(chr(31) || '" + tag + "' || chr(31))"
}
