package session

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
	"github.com/ordo-db/ordo/internal/wire"
)

// session follows one client session. Its methods run on the session's wire
// goroutine, one at a time.
type session struct {
	h    *Hooks
	be   wire.Backend
	info wire.SessionInfo
	pid  uint32

	user       string
	searchPath string
	env        analysis.Env
	envStale   bool // a SET may have changed search_path

	// stmts holds the analysis of prepared statements by name ("" is the
	// unnamed statement).
	stmts map[string][]*analysis.Statement
	// sent holds the text PostgreSQL runs each prepared statement as
	// (its Parse, or what Ordo rewrote it to).
	sent map[string]string

	// The current transaction.
	tx txState
	// unit is true while a unit of messages (up to Sync, or one Query) is
	// being processed; the session acts at the first message of a unit.
	unitStarted bool
	// pendingErr is the outcome of a commit path run when COMMIT was
	// parsed; it is returned when that COMMIT executes.
	pendingErr error
	// aborted is set by Hooks.Abort (another goroutine): the transaction
	// was aborted for a replication conflict.
	aborted atomic.Bool
	// inTxn: a transaction block is open or being opened (read by
	// Hooks.Abort on another goroutine).
	inTxn atomic.Bool
	// rejectNext: the next statement (Bind or Query) other than ROLLBACK
	// fails with the brute-force error (set when an aborted transaction
	// was ended early to let a Parse through).
	rejectNext bool
	// heldUnnamed is the NOTIFY, LISTEN or UNLISTEN held in place of the
	// unnamed prepared statement (see heldNoop).
	heldUnnamed string
	// syncRead makes every transaction wait for the cluster's latest
	// commits before its snapshot (SET ordo.read_consistency = 'sync').
	syncRead bool
	// label is the client's name for its current or next update
	// transaction (SET ordo.txn_label), recorded with its outcome.
	label      string
	labelLocal bool // set with SET LOCAL: forgotten when the transaction ends
}

type txState struct {
	active   bool   // inside a transaction (explicit or wrapped)
	wrapped  bool   // we sent BEGIN for an autocommit statement
	snapshot bool   // snapshot_seqno recorded
	snapSeq  uint64 // snapshot_seqno
	reads    txn.ReadSet
	ddl      []ddlStmt // DDL sent, joined with what ran at termination (ddl.go)
	// blocks counts, by the md5 of the query text, the runs of messages
	// holding statements that may run DDL inside them (DO, CALL,
	// functions): a DDL record no statement accounts for is replayed as
	// its top-level query only if that ran once, without parameters.
	blocks map[string]blockRuns
	// seqBefore: the sequences' positions before the first setval.
	seqBefore seqState
	// notify holds LISTEN, UNLISTEN and NOTIFY statements sent inside the
	// transaction: PostgreSQL refuses to PREPARE a transaction that ran
	// them, so they run in the transaction's final local commit instead
	// (PostgreSQL acts on them at commit anyway).
	notify []string
	// fixIsolation: a BEGIN asked for another isolation level; the session
	// resets it to REPEATABLE READ before the first statement.
	fixIsolation bool
	done         bool // terminated; the client's COMMIT ends an empty txn
	// cons: its conflict classes (cons.go).
	cons consTx
}

// heldNoop runs in place of a NOTIFY, LISTEN or UNLISTEN parsed as the
// unnamed statement inside a transaction; the statement itself runs in the
// transaction's final local commit.
const heldNoop = "DO $ordo$ BEGIN END $ordo$"

// Statement implements wire.SessionHooks.
func (s *session) Statement(ctx context.Context, st *wire.Statement) error {
	first := !s.unitStarted
	if first && s.syncRead && !s.tx.snapshot && st.Kind != wire.KindCloseStatement {
		// Read-your-writes anywhere: before anything that may look at data
		// (PostgreSQL resolves names at Parse), catch up with the cluster.
		if err := s.sync(ctx); err != nil {
			return err
		}
	}
	if s.rejectNext && (st.Kind == wire.KindQuery || st.Kind == wire.KindBind) {
		// The transaction was aborted by brute force and rolled back to
		// let a Parse through (see below): its client must learn it at
		// its next statement, unless that is its ROLLBACK.
		s.rejectNext = false
		stmts := s.stmts[st.Name]
		if st.Kind == wire.KindQuery {
			stmts = s.analyze(st.SQL)
		}
		if len(stmts) != 1 || stmts[0].Kind != analysis.KindTxn || stmts[0].Txn.Op != analysis.TxnRollback {
			return errBruteForce
		}
	}
	if first && st.Kind == wire.KindParse && s.aborted.Load() && s.be.TxStatus() == 'E' {
		// Aborted by brute force while idle: the transaction is failed,
		// and PostgreSQL would refuse to parse anything in it (drivers
		// such as pgbench prepare lazily, mid-transaction). End it so the
		// Parse succeeds; the next statement fails instead.
		s.rollback(ctx)
		s.tx = txState{}
		s.rejectNext = true
	}
	switch st.Kind {
	case wire.KindQuery:
		s.unitStarted = true
		stmts := s.analyze(st.SQL)
		s.rewrite(st, stmts)
		return s.execute(ctx, stmts, nil, at{wire.KindQuery, true, sentText(st)})
	case wire.KindParse:
		s.unitStarted = true
		stmts := s.analyze(st.SQL)
		s.rewrite(st, stmts)
		s.stmts[st.Name] = stmts
		s.sent[st.Name] = sentText(st)
		if st.Name == "" {
			s.heldUnnamed = ""
			if len(stmts) == 1 && stmts[0].Kind == analysis.KindNotify && (s.tx.active || s.be.TxStatus() == 'T') {
				// PostgreSQL refuses to PREPARE a transaction that ran
				// NOTIFY, LISTEN or UNLISTEN: hold it, and let
				// PostgreSQL run a no-op in its place (the client sees
				// the tag DO).
				s.heldUnnamed = stmts[0].SQL
				st.Rewrite = heldNoop
				return nil
			}
		}
		// A transaction-control statement acts when it is parsed as the
		// first message of a unit: later in the unit the backend is not
		// at a boundary. Other statements act at Bind.
		if first && isTxnControl(stmts) {
			return s.execute(ctx, stmts, nil, at{wire.KindParse, true, sentText(st)})
		}
		for _, a := range stmts {
			if a.Kind == analysis.KindRefused {
				return pgErr(codeFeatureNotSupported, "%s", a.Reason)
			}
		}
		// An update statement parsed as the first message of a unit
		// outside a transaction block is wrapped now, at the boundary:
		// drivers send Parse/Bind/Execute/Sync in one unit (pgjdbc,
		// libpq's PQexecParams), so at Bind it would be too late. A unit
		// that only prepares the statement commits an empty transaction.
		if first && updates(stmts) && s.be.TxStatus() == 'I' && !s.tx.active {
			if err := s.wrap(ctx); err != nil {
				return err
			}
		}
		if err := s.atParse(ctx, stmts, first); err != nil {
			return err
		}
		if first && setsSequence(stmts) && s.be.TxStatus() != 'E' {
			// Parse runs nothing: the positions now are those before the
			// statement executes, later in this unit.
			return s.noteSequences(ctx)
		}
		return nil
	case wire.KindBind:
		s.unitStarted = true
		if st.Name == "" && s.heldUnnamed != "" {
			if !s.tx.active && s.be.TxStatus() != 'T' {
				return pgErr(codeFeatureNotSupported,
					"ordo: a NOTIFY, LISTEN or UNLISTEN prepared inside a transaction cannot be executed outside it; send it again")
			}
			s.tx.notify = append(s.tx.notify, s.heldUnnamed)
			return nil
		}
		stmts := s.stmts[st.Name]
		if stmts == nil {
			// Never parsed through this session (PostgreSQL will report an
			// unknown statement): assume the worst.
			stmts = []*analysis.Statement{opaque("a statement this session did not see prepared")}
		}
		params := make([]analysis.Param, len(st.Params))
		for i, p := range st.Params {
			params[i] = analysis.Param{Value: p, Binary: paramBinary(st.ParamFormats, i)}
		}
		if isTxnControl(stmts) && !first && s.pendingErr == nil && (s.tx.done || !hasCommit(stmts)) {
			return nil // acted on when parsed earlier in this unit
		}
		return s.execute(ctx, stmts, params, at{wire.KindBind, first, s.sent[st.Name]})
	case wire.KindCloseStatement:
		delete(s.stmts, st.Name)
		delete(s.sent, st.Name)
	}
	return nil
}

// rewrite runs a statement the analysis rewrote (CREATE/DROP INDEX
// CONCURRENTLY, which cannot run in the transaction Ordo replicates it in)
// as rewritten, and tells the client. Inside a transaction block
// PostgreSQL refuses the statement itself, as it would without Ordo.
func (s *session) rewrite(st *wire.Statement, stmts []*analysis.Statement) {
	if len(stmts) != 1 || stmts[0].Rewrite == "" || s.be.TxStatus() != 'I' || s.tx.active {
		return
	}
	st.Rewrite = stmts[0].Rewrite
	s.be.Notice(stmts[0].Notice)
}

func paramBinary(formats []int16, i int) bool {
	switch len(formats) {
	case 0:
		return false
	case 1:
		return formats[0] == 1
	}
	return i < len(formats) && formats[i] == 1
}

// analyze analyzes sql. Text the analyzer cannot analyze (PostgreSQL will
// most likely reject it) is treated as a statement that may read and write
// anything, so nothing it does can escape replication.
func (s *session) analyze(sql string) []*analysis.Statement {
	stmts, err := s.analyzeText(sql)
	if err != nil {
		return []*analysis.Statement{opaque(err.Error())}
	}
	return stmts
}

func opaque(why string) *analysis.Statement {
	return &analysis.Statement{Kind: analysis.KindOpaque, Executes: true, ReadsAll: true, WritesAll: true,
		Reason: "not analyzable: " + why}
}

func (s *session) analyzeText(sql string) ([]*analysis.Statement, error) {
	if s.envStale {
		s.envStale = false
		if res, err := s.be.Exec(context.Background(), "SELECT current_setting('search_path')"); err == nil && res.Err == nil && len(res.Rows) == 1 {
			s.searchPath = res.Rows[0][0]
			s.env = analysis.NewEnv(catalog.SearchPath(s.searchPath, s.user))
		}
	}
	return s.h.cfg.Analyzer.Analyze(sql, s.env)
}

func notifyTag(parseNode string) string {
	switch parseNode {
	case "ListenStmt":
		return "LISTEN"
	case "UnlistenStmt":
		return "UNLISTEN"
	}
	return "NOTIFY"
}

func updates(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.Updates() {
			return true
		}
	}
	return false
}

func setsSequence(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.SetsSequence {
			return true
		}
	}
	return false
}

func isTxnControl(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.Kind == analysis.KindTxn {
			return true
		}
	}
	return false
}

func hasCommit(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.Kind == analysis.KindTxn && a.Txn.Op == analysis.TxnCommit {
			return true
		}
	}
	return false
}

// at says which client message statements arrive with, and whether it is
// the first of its unit: the backend has then answered everything before
// it, so the session may run its own statements first.
type at struct {
	kind  wire.StatementKind // KindQuery, KindParse or KindBind
	first bool
	sent  string // the query text PostgreSQL runs it in
}

// sentText is the text PostgreSQL receives for st.
func sentText(st *wire.Statement) string {
	if st.Rewrite != "" {
		return st.Rewrite
	}
	return st.SQL
}

// execute handles statements about to run (or, for a Parse, about to be
// prepared).
func (s *session) execute(ctx context.Context, stmts []*analysis.Statement, params []analysis.Param, m at) error {
	atBoundary := m.first
	updates, control := false, 0
	for _, a := range stmts {
		if a.Kind == analysis.KindRefused {
			return pgErr(codeFeatureNotSupported, "%s", a.Reason)
		}
		if a.Updates() {
			updates = true
		}
		if a.Kind == analysis.KindTxn {
			control++
		}
	}
	if control > 0 && len(stmts) > 1 && updates {
		return pgErr(codeFeatureNotSupported,
			"ordo: a query string that both controls the transaction (BEGIN/COMMIT/ROLLBACK) and writes must be sent as separate statements")
	}

	for _, a := range stmts {
		if s.tx.done && a.Kind != analysis.KindTxn && a.Kind != analysis.KindEmpty {
			// The transaction was terminated when its COMMIT was parsed;
			// nothing may run between that and the COMMIT itself.
			return pgErr(codeFeatureNotSupported,
				"ordo: this transaction was already terminated when its COMMIT was parsed; execute the COMMIT before other statements")
		}
		switch a.Kind {
		case analysis.KindTxn:
			if err := s.txnControl(ctx, a, m); err != nil {
				return err
			}
			continue
		case analysis.KindSession:
			s.setting(a)
			continue
		case analysis.KindNotify:
			if s.be.TxStatus() == 'T' && m.first && len(stmts) == 1 && m.kind == wire.KindQuery {
				s.tx.notify = append(s.tx.notify, a.SQL)
				s.unitStarted = false // no ReadyForQuery comes for a completed query
				return &wire.Completed{Tag: notifyTag(a.Tag)}
			}
			continue
		case analysis.KindEmpty, analysis.KindLocal:
			continue
		}
		status := s.be.TxStatus()
		if status == 'E' {
			continue // PostgreSQL rejects it: the transaction already failed
		}
		if status == 'I' && !s.tx.active {
			if a.Updates() {
				if !atBoundary {
					return pgErr(codeFeatureNotSupported,
						"ordo: an update statement pipelined after other statements without a transaction block cannot be replicated; wrap it in BEGIN … COMMIT")
				}
				if err := s.wrap(ctx); err != nil {
					return err
				}
			} else {
				// An autocommit read runs on the local snapshot; nothing
				// to track.
				continue
			}
		}
		if !s.tx.active {
			s.tx.active = true // inside a block the proxy saw begin in another unit
		}
		if err := s.consBegin(ctx, a, params, atBoundary); err != nil {
			return err
		}
		if err := s.beforeSnapshot(ctx, atBoundary); err != nil {
			return err
		}
		if a.SetsSequence && s.tx.seqBefore == nil {
			if !atBoundary {
				return pgErr(codeFeatureNotSupported,
					"ordo: setval pipelined after other statements in one batch cannot be replicated; send it after a Sync")
			}
			if err := s.noteSequences(ctx); err != nil {
				return err
			}
		}
		s.track(a, params, m)
	}
	return nil
}

// txnControl follows BEGIN / COMMIT / ROLLBACK.
func (s *session) txnControl(ctx context.Context, a *analysis.Statement, m at) error {
	atBoundary, atParse := m.first, m.kind == wire.KindParse
	switch a.Txn.Op {
	case analysis.TxnRollback, analysis.TxnBegin:
		s.pendingErr = nil
	}
	switch a.Txn.Op {
	case analysis.TxnBegin:
		s.noticeIsolation(a.Txn.Isolation, m)
		s.inTxn.Store(true)
		if s.be.TxStatus() == 'I' && !s.tx.active {
			s.tx = txState{active: true}
			if a.Txn.Isolation != "" && a.Txn.Isolation != "repeatable read" {
				s.tx.fixIsolation = true
			}
			s.consBeginComment(a.SQL)
		}
	case analysis.TxnCommit:
		if err := s.pendingErr; err != nil && !atParse {
			s.pendingErr = nil
			return err
		}
		if s.aborted.Load() && s.be.TxStatus() != 'I' && atBoundary {
			// Chosen as a brute-force victim: whether or not the cancel
			// reached a statement (it races with the statement's end), the
			// transaction must not commit, and the client must learn why.
			s.rollback(ctx)
			if atParse {
				s.pendingErr = errBruteForce
				return nil
			}
			return errBruteForce
		}
		if s.tx.done || !s.tx.active || s.be.TxStatus() != 'T' {
			return nil // nothing to replicate: PostgreSQL answers as usual
		}
		if !atBoundary {
			return pgErr(codeFeatureNotSupported,
				"ordo: COMMIT pipelined after other statements in one batch cannot be replicated; send COMMIT after a Sync")
		}
		if a.Txn.Chain {
			return pgErr(codeFeatureNotSupported, "ordo: COMMIT AND CHAIN is not supported")
		}
		if atParse {
			// Terminate now, while the backend is at a boundary, but a
			// Parse executes nothing: the outcome goes to the client when
			// the COMMIT is bound and executed.
			s.pendingErr = s.commitExplicit(ctx)
			return nil
		}
		return s.commitExplicit(ctx)
	case analysis.TxnRollback:
		// PostgreSQL rolls back; the state resets at ReadyForQuery.
	case analysis.TxnSetTransaction:
		s.noticeIsolation(a.Txn.Isolation, m)
		if a.Txn.Isolation != "" && a.Txn.Isolation != "repeatable read" {
			s.tx.fixIsolation = true
		}
	}
	return nil
}

// noticeIsolation tells a client asking for SERIALIZABLE what it gets when
// the cluster provides snapshot isolation.
func (s *session) noticeIsolation(level string, m at) {
	if level == "serializable" && !s.h.cfg.Replica.CertifiesReads() && m.kind != wire.KindParse {
		s.be.Notice("ordo: this cluster runs protocol " + s.h.cfg.Replica.Name() +
			", which provides snapshot isolation, not serializability: write skew between concurrent transactions is possible")
	}
}

// setting notes session settings Ordo interprets.
func (s *session) setting(a *analysis.Statement) {
	st := a.Setting
	if st == nil {
		return
	}
	switch {
	case st.Name == "search_path" || st.Name == "all":
		s.envStale = true
	case st.Name == "ordo.read_consistency" && !st.Show:
		s.syncRead = strings.EqualFold(strings.Trim(st.Value, "'"), "sync")
	case (st.Name == "ordo.conflict_classes" || st.Name == "ordo.profile") && !st.Show:
		s.consSetting(st.Name, st.Value)
	case st.Name == "ordo.txn_label" && !st.Show:
		// Names the current update transaction, or the next one: it is
		// used by one termination, then forgotten.
		s.label, s.labelLocal = strings.Trim(st.Value, "'"), st.Local
		if st.Reset {
			s.label = ""
		}
	}
}

// wrap starts a transaction block for an autocommit update statement and
// holds the unit's ReadyForQuery until it is terminated.
func (s *session) wrap(ctx context.Context) error {
	res, err := s.be.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	if err != nil {
		return err
	}
	if res.Err != nil {
		if canceled(res.Err) {
			return errBruteForce // a late cancel of an aborted transaction
		}
		return res.Err
	}
	s.tx = txState{active: true, wrapped: true}
	s.inTxn.Store(true)
	s.be.HoldReady()
	return nil
}

// beforeSnapshot records snapshot_seqno before the transaction's first
// snapshot-taking statement.
func (s *session) beforeSnapshot(ctx context.Context, atBoundary bool) error {
	if s.tx.snapshot {
		return nil
	}
	s.tx.snapshot = true
	if s.tx.fixIsolation && atBoundary {
		s.tx.fixIsolation = false
		if res, err := s.be.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
			return err
		} else if res.Err != nil {
			if canceled(res.Err) {
				return errBruteForce
			}
			return res.Err
		}
	}
	s.tx.snapSeq = s.h.cfg.Replica.AppliedPrefix()
	return nil
}

func (s *session) sync(ctx context.Context) error {
	if err := s.h.cfg.Replica.SyncRead(ctx); err != nil {
		return pgErr(codeResolutionUnknown, "ordo: sync read: %v", err)
	}
	return nil
}

// track adds a statement's reads and DDL to the transaction.
func (s *session) track(a *analysis.Statement, params []analysis.Param, m at) {
	if a.Kind == analysis.KindDDL {
		if a.Tag == "TruncateStmt" {
			return // its decoded truncate carries it, as it ran (or not at all, rolled back)
		}
		s.tx.ddl = append(s.tx.ddl, newDDLStmt(a, m.sent))
		return // DDL reads the catalog, which only DDL changes, in total order
	}
	if a.Kind == analysis.KindOpaque {
		s.tx.noteBlock(m)
	}
	if !s.h.cfg.Replica.CertifiesReads() {
		return
	}
	if a.ReadsAll {
		s.tx.reads.AddAll()
		return
	}
	fp, err := a.Bind(params)
	if err != nil {
		if errors.Is(err, analysis.ErrParams) {
			s.tx.reads.AddAll()
		}
		return
	}
	if fp.All {
		s.tx.reads.AddAll()
		return
	}
	s.tx.reads.SetLimit(s.h.cfg.KeyEscalationRows)
	for _, k := range fp.Reads {
		s.tx.reads.Add(k)
	}
}

// ReadyForQuery implements wire.SessionHooks.
func (s *session) ReadyForQuery(status byte) {
	s.unitStarted = false
	s.inTxn.Store(status != 'I')
	if status == 'I' {
		if s.labelLocal {
			s.label, s.labelLocal = "", false
		}
		s.consEnd()
		s.tx = txState{}
		s.aborted.Store(false)
	} else if status == 'T' && !s.tx.active {
		s.tx.active = true
	}
}

// Close implements wire.SessionHooks.
func (s *session) Close() {
	s.consEnd()
	s.h.forget(s)
}
