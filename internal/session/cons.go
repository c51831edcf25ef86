package session

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
)

// Conflict classes under cons (DESIGN.md "Conflict classes", "cons").
// Before a transaction's first snapshot-taking statement the session
// decides its classes and waits until it holds them
// (termination.ClassScheduler.Begin); every statement, and at commit the
// decoded write set (triggers and cascades included), must stay inside
// them. A transaction's classes come from, in this order:
//
//  1. SET LOCAL ordo.conflict_classes = 'warehouse[w=3], item', or a
//     leading comment on BEGIN: /* ordo.conflict_classes: … */ BEGIN;
//  2. SET LOCAL ordo.profile = 'new_order(w=3)' (a profile of the
//     cluster's configuration);
//  3. for a single autocommit statement, the analyzer;
//  4. otherwise the cluster's catch-all (classes.CatchAll; by default
//     "*", the whole database: it runs alone).
//
// A statement that touches an undeclared class is refused with an error
// naming the class, and the transaction can only roll back: its COMMIT
// rolls it back with the same error. Nothing of it is replicated. A
// transaction holding classes idle for longer than ClassIdle loses its
// session (PostgreSQL's idle_in_transaction_session_timeout, set when the
// classes are taken at a message boundary), which releases them.

// codeUndeclaredClass is the SQLSTATE of a statement outside the
// transaction's classes (object_not_in_prerequisite_state), and
// codeClassWait that of a wait for classes that timed out
// (lock_not_available).
const (
	codeUndeclaredClass = "55000"
	codeClassWait       = "55P03"
)

// defaultClassWait bounds the wait for a transaction's classes.
const defaultClassWait = 30 * time.Second

// consTx is a transaction's conflict classes.
type consTx struct {
	decl, profile string // declared by SET LOCAL
	gid           txn.GID
	declared      []txn.ClassRef
	held          bool  // Begin returned: the classes are held
	refused       error // a statement touched an undeclared class
	// refusedAt is how many savepoints the block had when refused was
	// set and still has: a ROLLBACK TO one of them undoes the refusal
	// (a RELEASE lowers it).
	refusedAt int
}

// scheduler returns the engine's class scheduler (nil if it has none).
func (s *session) scheduler() termination.ClassScheduler {
	if s.h.cfg.Classes == nil {
		return nil
	}
	cs, _ := s.h.cfg.Replica.(termination.ClassScheduler)
	return cs
}

// beginDirective is a declaration in a leading comment of BEGIN:
//
//	/* ordo.conflict_classes: warehouse[w=3], item */ BEGIN
//	-- ordo.profile = new_order(w=3)
//	BEGIN
var beginDirective = regexp.MustCompile(`^\s*(?:/\*\s*(ordo\.(?:conflict_classes|profile))\s*[:=]\s*(.*?)\s*\*/|--\s*(ordo\.(?:conflict_classes|profile))\s*[:=]\s*([^\n]*))`)

// consBeginComment notes a declaration in a leading comment of the BEGIN
// that opened the transaction.
func (s *session) consBeginComment(sql string) {
	m := beginDirective.FindStringSubmatch(sql)
	switch {
	case m == nil:
	case m[1] != "":
		s.consSetting(m[1], m[2])
	default:
		s.consSetting(m[3], strings.TrimSpace(m[4]))
	}
}

// consSetting notes SET LOCAL ordo.conflict_classes / ordo.profile.
func (s *session) consSetting(name, value string) {
	v := strings.Trim(value, "'")
	switch name {
	case "ordo.conflict_classes":
		s.tx.cons.decl = v
	case "ordo.profile":
		s.tx.cons.profile = v
	}
}

// consBegin, before statement a of the transaction runs, takes the
// transaction's classes if it does not hold them yet, then checks that a
// stays inside them; lone says a is the only statement of its message.
func (s *session) consBegin(ctx context.Context, a *analysis.Statement, params []analysis.Param, atBoundary, lone bool) error {
	held, err := s.consTake(ctx, a, params, atBoundary)
	if err != nil || !held {
		return err
	}
	ct := &s.tx.cons
	if a.Unparsed {
		// PostgreSQL's grammar refuses it too: it runs nothing, and its
		// error is the client's to see (were it to run after all, its
		// writes are checked against the classes at commit).
		return nil
	}
	if a.Kind == analysis.KindDDL {
		if !covers(ct.declared, txn.ClassRef{Name: analysis.AllClasses}) {
			return s.consRefuse(pgErr(codeUndeclaredClass, "ordo: DDL touches every conflict class, and this transaction declared only %s; declare '*' to run DDL", refString(ct.declared)))
		}
		return nil
	}
	fp, err := a.Bind(params)
	if errors.Is(err, analysis.ErrParams) {
		// Fewer parameters than the statement uses: PostgreSQL refuses
		// the Bind (08P01) or the query (42P02), so the statement runs
		// nothing, and its error is the client's to see. Refusing it
		// here would leave the transaction unable to go on after a
		// ROLLBACK TO SAVEPOINT, for a refusal the client never saw.
		return nil
	}
	if err != nil {
		fp = &analysis.Footprint{All: true, WritesAll: a.Updates()}
	}
	if err := s.h.cfg.Classes().Classes.Check(s.h.cfg.Catalog.Current(), ct.declared, a, fp, true); err != nil {
		if missing, merr := s.relationsMissing(ctx, a, atBoundary && lone); merr != nil {
			return merr
		} else if missing {
			// It names a relation that does not exist: PostgreSQL
			// refuses it (42P01) before running any of it, as it would
			// without Ordo, and the transaction fails as it would.
			return nil
		}
		return s.consRefuse(pgErr(codeUndeclaredClass, "ordo: %v; the transaction can only roll back", err))
	}
	return nil
}

// relationsMissing reports whether statement a, which may touch every
// class because it names relations the catalog does not know (and for no
// other reason the analysis could not read), names one that PostgreSQL
// does not know either, in the session's own terms (its search_path,
// its temporary tables). Asked only (askable) at a boundary, for a
// statement alone in its message (one before it in a query string, run
// after the question, could create the relation or change the
// search_path), after the statement's snapshot is prepared for (the
// question takes it). The answer was 55000 ("may touch every class")
// where PostgreSQL answers 42P01.
func (s *session) relationsMissing(ctx context.Context, a *analysis.Statement, askable bool) (bool, error) {
	if !askable || len(a.UnknownRelations) == 0 || len(a.UnknownRelations) != len(a.Unknown) {
		return false, nil
	}
	if err := s.beforeSnapshot(ctx, true); err != nil {
		return false, err
	}
	var rows []string
	for _, n := range a.UnknownRelations {
		rows = append(rows, "("+escapedLiteral(n.Schema)+", "+escapedLiteral(n.Name)+")")
	}
	res, err := s.be.Exec(ctx, `SELECT count(*) FROM (VALUES `+strings.Join(rows, ", ")+`) v(s, n)
WHERE pg_catalog.to_regclass(CASE WHEN v.s = '' THEN pg_catalog.quote_ident(v.n) ELSE pg_catalog.quote_ident(v.s) || '.' || pg_catalog.quote_ident(v.n) END) IS NULL`)
	if err != nil {
		return false, err
	}
	if res.Err != nil {
		if s.bruteForced(res) {
			return false, errBruteForce
		}
		return false, nil // (the refusal stands)
	}
	return len(res.Rows) == 1 && len(res.Rows[0]) == 1 && res.Rows[0][0] != "0", nil
}

// consTake takes the transaction's classes, before statement a (params
// nil at Parse) takes its snapshot, unless it holds them; held reports
// whether it holds classes (false when the cluster does not run cons).
func (s *session) consTake(ctx context.Context, a *analysis.Statement, params []analysis.Param, atBoundary bool) (held bool, err error) {
	sched := s.scheduler()
	ct := &s.tx.cons
	if sched == nil || a.Kind == analysis.KindSession || (!ct.held && s.h.cfg.Replica.Name() != termination.CONS) {
		return false, nil
	}
	if ct.refused != nil {
		return false, ct.refused
	}
	if ct.held {
		return true, nil
	}
	if s.tx.snapshot {
		// Its snapshot predates its classes.
		if s.tx.batchSnap && s.unitCons {
			return false, pgErr(codeFeatureNotSupported,
				"ordo: under protocol cons a transaction takes its conflict classes before its snapshot, and this one's was taken by a statement earlier in its batch (a read, then an update or a BEGIN, with no Sync between them); begin the transaction before its first statement, or send the update in a batch of its own")
		}
		return false, pgErr(codeSerializationFailure, "ordo: the cluster switched to protocol cons while this transaction ran; retry it")
	}
	refs, err := s.consDeclared(s.h.cfg.Classes(), a, params)
	if err != nil {
		return false, pgErr(codeUndeclaredClass, "ordo: %v", err)
	}
	ct.declared, ct.gid = refs, s.h.nextGID()
	wait := s.h.cfg.ClassWait
	if wait <= 0 {
		wait = defaultClassWait
	}
	cctx, stop := s.untilCanceled(ctx)
	wctx, cancel := context.WithTimeout(cctx, wait)
	began := time.Now()
	err = sched.Begin(wctx, ct.gid, refs)
	cancel()
	stop()
	if s.wasCanceled() {
		if err == nil {
			// Granted as the cancel came: PostgreSQL, idle, dropped it.
			sched.End(ct.gid)
		}
		ct.gid = ""
		return false, pgErr(codeQueryCanceled, "ordo: %v (it waited %s for the conflict classes %s; the transaction holds nothing)",
			termination.ErrClientCanceled, time.Since(began).Round(time.Millisecond), refString(refs))
	}
	if errors.Is(err, termination.ErrProtocolSwitched) || errors.Is(err, termination.ErrClassesReleased) {
		ct.gid = ""
		return false, pgErr(codeSerializationFailure, "ordo: %v; retry it", err)
	}
	if errors.Is(err, totalorder.ErrNoQuorum) {
		ct.gid = ""
		return false, pgErr(codeClassWait, "ordo: this node cannot reach a majority of the cluster, so the conflict classes %s cannot be granted (%v); the transaction holds nothing, retry it",
			refString(refs), err)
	}
	if err != nil {
		ct.gid = ""
		return false, pgErr(codeClassWait, "ordo: waited %s for the conflict classes %s without getting them (%v); the transaction holds nothing, retry it",
			time.Since(began).Round(time.Millisecond), refString(refs), err)
	}
	ct.held = true
	if idle := s.h.cfg.ClassIdle; idle > 0 && atBoundary {
		// A client that sits on its classes would hold up every
		// conflicting transaction in the cluster: PostgreSQL ends its
		// session after idle, which releases them (consEnd at Close).
		res, err := s.be.Exec(ctx, fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", idle.Milliseconds()))
		if err != nil {
			return true, err
		}
		if res.Err != nil {
			return true, res.Err
		}
	}
	return true, nil
}

// consDeclared decides the classes of the transaction whose first
// statement is a.
func (s *session) consDeclared(set classes.Set, a *analysis.Statement, params []analysis.Param) ([]txn.ClassRef, error) {
	ct := &s.tx.cons
	switch {
	case ct.decl != "":
		return set.Classes.ParseClasses(ct.decl)
	case ct.profile != "":
		return classes.Profile(set.Config, set.Classes, ct.profile)
	case s.tx.wrapped && a.Kind != analysis.KindDDL:
		fp, err := a.Bind(params)
		if err != nil {
			// At Parse, without the parameters: the classes of the whole
			// tables it names.
			fp = &analysis.Footprint{All: a.ReadsAll, WritesAll: a.WritesAll}
		}
		uses, all, _ := set.Classes.Derive(s.h.cfg.Catalog.Current(), a, fp, true)
		if all {
			break
		}
		var refs []txn.ClassRef
		for _, u := range uses {
			refs = append(refs, u.Class)
		}
		if len(refs) > 0 {
			return refs, nil
		}
	}
	return classes.CatchAll(set.Config, set.Classes)
}

// consRefuse remembers that the transaction touched an undeclared class:
// it can only roll back.
func (s *session) consRefuse(err error) error {
	s.tx.cons.refused, s.tx.cons.refusedAt = err, len(s.tx.savepoints)
	return err
}

// consCommit, at COMMIT, rolls back a transaction that touched an
// undeclared class.
func (s *session) consCommit(ctx context.Context) error {
	if err := s.tx.cons.refused; err != nil {
		s.rollback(ctx)
		s.consEnd()
		return err
	}
	return nil
}

// consGID returns the gid the transaction's classes were taken under, or
// a new one.
func (s *session) consGID() txn.GID {
	if s.tx.cons.gid != "" {
		return s.tx.cons.gid
	}
	return s.h.nextGID()
}

// consCheckWrites checks the decoded write set against the declared
// classes: triggers, cascades and foreign-key actions write too.
func (s *session) consCheckWrites(ws *capture.WriteSet) error {
	if s.scheduler() == nil || !s.tx.cons.held {
		return nil
	}
	fp := &analysis.Footprint{}
	for i := range ws.Rows {
		if k := ws.Rows[i].Key; k.Table != "" {
			fp.Writes = append(fp.Writes, k)
		} else {
			t := ws.Rows[i].Table
			fp.Writes = append(fp.Writes, txn.TableKey(t.Schema, t.Name))
		}
	}
	for i := range ws.LargeObjects {
		fp.Writes = append(fp.Writes, capture.LargeObjectKey(ws.LargeObjects[i].OID))
	}
	if err := s.h.cfg.Classes().Classes.Check(s.h.cfg.Catalog.Current(), s.tx.cons.declared, &analysis.Statement{}, fp, false); err != nil {
		var ce *analysis.ClassError
		if errors.As(err, &ce) {
			return pgErr(codeUndeclaredClass, "ordo: the transaction wrote (through a trigger, a cascade or a function) outside its conflict classes: %v; it was rolled back", err)
		}
		return err
	}
	return nil
}

// consEnd releases the classes of a transaction that ends without a
// TxnEntry (a no-op once its TxnEntry was proposed).
func (s *session) consEnd() {
	if sched := s.scheduler(); sched != nil && s.tx.cons.gid != "" {
		sched.End(s.tx.cons.gid)
	}
	s.tx.cons = consTx{}
}

func covers(declared []txn.ClassRef, r txn.ClassRef) bool {
	for _, d := range declared {
		if d.Name == analysis.AllClasses || d.Covers(r) {
			return true
		}
	}
	return false
}

func refString(refs []txn.ClassRef) string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	return strings.Join(out, ", ")
}
