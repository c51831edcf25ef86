package wire

import (
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// sendAll notes msgs sent to PostgreSQL, in order.
func (u *unnamedTracker) sendAll(msgs ...pgproto3.FrontendMessage) {
	for _, m := range msgs {
		u.sent(m)
	}
}

// replyAll feeds PostgreSQL's replies msgs, in order.
func (u *unnamedTracker) replyAll(msgs ...pgproto3.BackendMessage) {
	for _, m := range msgs {
		u.reply(m)
	}
}

// TestTrackerFollowsNamedStatements: the tracker knows what PostgreSQL
// holds under a name from its replies, not from what the client sent.
func TestTrackerFollowsNamedStatements(t *testing.T) {
	var u unnamedTracker
	send, reply := u.sendAll, u.replyAll
	want := func(step, name, sql string, exists, known bool) {
		t.Helper()
		gs, ge, gk := u.namedStatement(name)
		if gs != sql || ge != exists || gk != known {
			t.Fatalf("%s: %s is (%q, exists %v, known %v), want (%q, %v, %v)", step, name, gs, ge, gk, sql, exists, known)
		}
	}
	rfq := &pgproto3.ReadyForQuery{TxStatus: 'I'}
	fail := &pgproto3.ErrorResponse{Code: "42P05"}

	want("at start", "a", "", false, true)
	send(&pgproto3.Parse{Name: "a", Query: "update t set n = 1"}, &pgproto3.Sync{})
	want("before the reply", "a", "", false, true)
	reply(&pgproto3.ParseComplete{}, rfq)
	want("parsed", "a", "update t set n = 1", true, true)

	send(&pgproto3.Parse{Name: "a", Query: "select 1"}, &pgproto3.Sync{})
	reply(fail, rfq)
	want("a refused Parse", "a", "update t set n = 1", true, true)

	send(&pgproto3.Parse{Query: "select 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Close{ObjectType: 'S', Name: "a"}, &pgproto3.Parse{Name: "b", Query: "select 2"}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.ErrorResponse{Code: "22012"}, rfq)
	want("a skipped Close", "a", "update t set n = 1", true, true)
	want("a skipped Parse", "b", "", false, true)

	send(&pgproto3.Close{ObjectType: 'S', Name: "a"}, &pgproto3.Sync{})
	reply(&pgproto3.CloseComplete{}, rfq)
	want("closed", "a", "", false, true)

	send(&pgproto3.Parse{Name: "c", Query: "select 3"}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	tag := func(t string) *pgproto3.CommandComplete { return &pgproto3.CommandComplete{CommandTag: []byte(t)} }
	send(&pgproto3.Query{String: "DEALLOCATE ALL; PREPARE c AS DELETE FROM t"})
	reply(tag("DEALLOCATE ALL"), tag("PREPARE"), rfq)
	want("after SQL's PREPARE", "c", "", false, false)
	if u.namedKnown() {
		t.Fatal("every name known after SQL's PREPARE")
	}
	send(&pgproto3.Parse{Name: "d", Query: "select 4"}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	want("parsed after SQL's PREPARE", "d", "select 4", true, true)
	want("unknown after SQL's PREPARE", "e", "", false, false)

	// The session reads them from PostgreSQL (learnNamed): known again.
	u.learnNamed(map[string]string{"c": "PREPARE c AS DELETE FROM t", "d": "select 4"}, nil, nil)
	if !u.namedKnown() {
		t.Fatal("a name unknown after learnNamed")
	}
	want("learned", "c", "PREPARE c AS DELETE FROM t", true, true)
	want("learned absent", "e", "", false, true)

	// The words in a query's text do nothing, its tags do.
	send(&pgproto3.Query{String: "select 'prepare', 1 as discard"})
	reply(tag("SELECT 1"), rfq)
	want("after a SELECT that says prepare", "d", "select 4", true, true)
	want("still absent", "e", "", false, true)
	// DEALLOCATE's tag does not say which name it freed: none is known
	// (a Bind of a deallocated COMMIT's name was taken for the COMMIT).
	send(&pgproto3.Query{String: "deallocate c"})
	reply(tag("DEALLOCATE"), rfq)
	want("after DEALLOCATE of another", "d", "", false, false)
	u.learnNamed(map[string]string{"d": "select 4"}, nil, nil)
	// An Execute's tags count too.
	send(&pgproto3.Parse{Query: "prepare e as select 5"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, tag("PREPARE"), rfq)
	want("after an Execute of SQL's PREPARE", "e", "", false, false)
	want("a name held, after an Execute of SQL's PREPARE", "d", "select 4", true, true)
	send(&pgproto3.Query{String: "discard all"})
	reply(tag("DISCARD ALL"), rfq)
	want("after DISCARD ALL", "d", "", false, true)
	want("after DISCARD ALL", "e", "", false, true)

	// A PREPARE after a DEALLOCATE may give a name it held another text.
	send(&pgproto3.Parse{Name: "f", Query: "select 6"}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	send(&pgproto3.Query{String: "deallocate f"})
	reply(tag("DEALLOCATE"), rfq)
	want("after DEALLOCATE of it", "f", "", false, false)
	send(&pgproto3.Query{String: "prepare f as delete from t"})
	reply(tag("PREPARE"), rfq)
	want("after DEALLOCATE then PREPARE", "f", "", false, false)
	// A PREPARE alone cannot replace a name: those held are kept.
	u.learnNamed(map[string]string{"f": "prepare f as delete from t"}, nil, nil)
	send(&pgproto3.Query{String: "prepare g as select 7"})
	reply(tag("PREPARE"), rfq)
	want("kept after a PREPARE", "f", "prepare f as delete from t", true, true)
	want("unknown after a PREPARE", "g", "", false, false)

	// The DEALLOCATEs of a Query the session named (QueryFrees) free
	// those names, in order, and leave the others known; another
	// message sent first cancels the naming.
	u.learnNamed(map[string]string{"h": "select 8", "i": "select 9", "j": "select 10"}, nil, nil)
	u.queryFrees("deallocate h; deallocate i", []string{"h", "i"})
	send(&pgproto3.Query{String: "deallocate h; deallocate i"})
	reply(tag("DEALLOCATE"), tag("DEALLOCATE"), rfq)
	want("freed by a named DEALLOCATE", "h", "", false, true)
	want("freed by the second", "i", "", false, true)
	want("kept", "j", "select 10", true, true)
	u.queryFrees("deallocate j", []string{"j"})
	send(&pgproto3.Query{String: "select 1"}, &pgproto3.Query{String: "deallocate j"})
	reply(tag("SELECT 1"), rfq, tag("DEALLOCATE"), rfq)
	want("after a DEALLOCATE the naming did not reach", "j", "", false, false)

	// A FunctionCall or a Sync answered with an error of its own (a
	// call in a failed block; an implicit transaction's commit failing
	// at its Sync) is no lost reply: every name stays known, the
	// unnamed statement too (the session fuzzer found a DECLARE CURSOR
	// taken for a statement that may write after such a call, and run
	// in a block of Ordo's).
	u.learnNamed(map[string]string{"h": "select 8"}, nil, nil)
	send(&pgproto3.Parse{Query: "select 9"}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	send(&pgproto3.FunctionCall{Function: 1397})
	reply(&pgproto3.ErrorResponse{Code: "25P02"}, &pgproto3.ReadyForQuery{TxStatus: 'E'})
	send(&pgproto3.Parse{Name: "i", Query: "insert into t values (1)"}, &pgproto3.Bind{PreparedStatement: "i"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, tag("INSERT 0 1"), &pgproto3.ErrorResponse{Code: "23505"}, rfq)
	if !u.namedKnown() {
		t.Fatal("names unknown after a FunctionCall's or a Sync's error")
	}
	want("after a FunctionCall's and a Sync's error", "h", "select 8", true, true)
	want("parsed before a Sync's error", "i", "insert into t values (1)", true, true)
	if u.stmt == nil || u.stmt.Query != "select 9" {
		t.Fatalf("unnamed statement %v after a FunctionCall's and a Sync's error", u.stmt)
	}
	send(&pgproto3.Parse{Name: "j", Query: "select 10"}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	want("the replies after them", "j", "select 10", true, true)
}

// TestTrackerDropsInjectedBeginAfterCopy: the seven replies of an
// injected BEGIN are dropped, and its error relayed, also in the unit
// after a COPY FROM STDIN started by an Execute, whose following Sync
// PostgreSQL ignored (ignoredSyncs).
func TestTrackerDropsInjectedBeginAfterCopy(t *testing.T) {
	var u unnamedTracker
	rfq := &pgproto3.ReadyForQuery{TxStatus: 'I'}
	for _, m := range []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "copy t from stdin"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}} {
		u.sent(m)
	}
	u.ignoredSyncs(1) // CopyData came: PostgreSQL was in COPY mode at that Sync
	u.sent(&pgproto3.Sync{})
	for _, m := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("COPY 1")}, rfq} {
		if drop, _, _, _ := u.reply(m); drop {
			t.Fatalf("the client's %T was dropped", m)
		}
	}
	if !u.answered() {
		t.Fatal("a message is still awaiting its reply after the COPY's ReadyForQuery")
	}

	// A BEGIN injected ahead of the next unit's Bind: seven replies, the
	// fifth its CommandComplete.
	u.sentInjected(false, true)
	u.sent(&pgproto3.Bind{})
	u.sent(&pgproto3.Execute{})
	u.sent(&pgproto3.Sync{})
	replies := []pgproto3.BackendMessage{&pgproto3.CloseComplete{}, &pgproto3.CloseComplete{}, &pgproto3.ParseComplete{},
		&pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.CloseComplete{}, &pgproto3.CloseComplete{}}
	for i, m := range replies {
		drop, began, _, _ := u.reply(m)
		if !drop || began != (i == 4) {
			t.Fatalf("injected reply %d (%T): drop %v, began %v", i, m, drop, began)
		}
	}
	for _, m := range []pgproto3.BackendMessage{&pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("UPDATE 1")}, rfq} {
		if drop, _, _, _ := u.reply(m); drop {
			t.Fatalf("the client's %T was dropped", m)
		}
	}

	// SetHere's SET TRANSACTION ahead of a Bind: dropped alike, and its
	// CommandComplete is no BEGIN.
	u.sentInjected(false, false)
	u.sent(&pgproto3.Bind{})
	u.sent(&pgproto3.Execute{})
	u.sent(&pgproto3.Sync{})
	replies[4] = &pgproto3.CommandComplete{CommandTag: []byte("SET")}
	for i, m := range replies {
		if drop, began, _, _ := u.reply(m); !drop || began {
			t.Fatalf("injected SET's reply %d (%T): drop %v, began %v", i, m, drop, began)
		}
	}
	for _, m := range []pgproto3.BackendMessage{&pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, rfq} {
		if drop, _, _, _ := u.reply(m); drop {
			t.Fatalf("the client's %T was dropped", m)
		}
	}

	// The same BEGIN failing at its Parse (statement_timeout): its error
	// is the client's to see, and the client's messages were skipped.
	u.sentInjected(false, true)
	u.sent(&pgproto3.Bind{})
	u.sent(&pgproto3.Execute{})
	u.sent(&pgproto3.Sync{})
	for i, m := range []pgproto3.BackendMessage{&pgproto3.CloseComplete{}, &pgproto3.CloseComplete{}} {
		if drop, _, _, _ := u.reply(m); !drop {
			t.Fatalf("injected reply %d relayed", i)
		}
	}
	if drop, _, _, _ := u.reply(&pgproto3.ErrorResponse{Code: "57014"}); drop {
		t.Fatal("the injected BEGIN's error was dropped")
	}
	if drop, _, _, _ := u.reply(rfq); drop || !u.answered() {
		t.Fatalf("after the Sync's ReadyForQuery: dropped %v, answered %v", drop, u.answered())
	}
}

// TestTrackerTellsACopysFate: what became of an Execute that may start a
// COPY FROM STDIN, as copyStarted asks it: undecided until PostgreSQL
// answers it, started by its CopyInResponse (not an earlier COPY's),
// not started when it fails or is skipped, and taken for started once
// the tracker has lost track.
func TestTrackerTellsACopysFate(t *testing.T) {
	var u unnamedTracker
	execute := func(sql string) uint64 {
		u.sent(&pgproto3.Parse{Query: sql})
		u.sent(&pgproto3.Bind{})
		return u.sent(&pgproto3.Execute{})
	}
	check := func(what string, seq uint64, started, decided bool) {
		t.Helper()
		if s, d := u.copyFate(seq); s != started || d != decided {
			t.Fatalf("%s: started %v, decided %v; want %v, %v", what, s, d, started, decided)
		}
	}
	check("no Execute", 0, false, true)
	a := execute("copy t from stdin")
	b := execute("copy missing from stdin")
	u.sent(&pgproto3.Sync{})
	check("a before any reply", a, false, false)
	u.reply(&pgproto3.ParseComplete{})
	u.reply(&pgproto3.BindComplete{})
	check("a answered by nothing yet", a, false, false)
	u.reply(&pgproto3.CopyInResponse{})
	check("a", a, true, true)
	check("b while a copies", b, false, false)
	u.reply(&pgproto3.CommandComplete{CommandTag: []byte("COPY 1")})
	u.reply(&pgproto3.ParseComplete{})
	u.reply(&pgproto3.BindComplete{})
	check("b after a's end", b, false, false)
	u.reply(&pgproto3.ErrorResponse{Code: "42P01"})
	check("b failed", b, false, true)

	// Skipped after an error at its Bind.
	c := execute("copy t from stdin")
	u.sent(&pgproto3.Sync{})
	u.reply(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	u.reply(&pgproto3.ParseComplete{})
	check("c before its Bind's reply", c, false, false)
	u.reply(&pgproto3.ErrorResponse{Code: "08P01"})
	check("c skipped", c, false, true)

	// Lost track: taken for started.
	d := execute("copy t from stdin")
	u.sent(&pgproto3.Sync{})
	u.reply(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}) // where c's Sync awaits a ReadyForQuery
	check("d after the tracker lost track", d, true, true)
}

// TestTrackerShowPortals: every Execute of a portal bound to a statement
// that answers a SHOW completes with SHOW, in a later unit too; the
// portals are forgotten when their transaction ends, and a DO block or a
// CALL leaves every name unknown (its dynamic SQL may prepare any).
func TestTrackerShowPortals(t *testing.T) {
	var u unnamedTracker
	show := "SELECT current_setting('x') || " + ShowMarkerSQL
	for _, m := range []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "sh", Query: show},
		&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "sh"}, &pgproto3.Execute{Portal: "p", MaxRows: 1},
		&pgproto3.Bind{DestinationPortal: "q", PreparedStatement: ""}, &pgproto3.Sync{}} {
		u.sent(m)
	}
	for _, m := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{},
		&pgproto3.DataRow{}, &pgproto3.PortalSuspended{}, &pgproto3.BindComplete{}, &pgproto3.ReadyForQuery{TxStatus: 'T'}} {
		u.reply(m)
	}
	if !u.showPortals["p"] || u.showPortals["q"] {
		t.Fatalf("show portals %v, want p only", u.showPortals)
	}
	u.sent(&pgproto3.Execute{Portal: "p"})
	u.sent(&pgproto3.Sync{})
	if _, _, show, _ := u.reply(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")}); !show {
		t.Fatal("the rest of p is not taken for a SHOW's")
	}
	u.reply(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if len(u.showPortals) != 0 {
		t.Fatalf("show portals %v after the transaction ended", u.showPortals)
	}
	for _, tag := range []string{"DO", "CALL"} {
		u.learnNamed(map[string]string{"sh": show}, nil, nil)
		u.sent(&pgproto3.Query{String: tag})
		u.reply(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
		u.reply(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if _, _, known := u.namedStatement("other"); known {
			t.Fatalf("after %s: names known", tag)
		}
	}
}

// TestDeadPortalsOfAFailedBlock: the portals a failed block's abort left
// behind, which an Execute must not reach (clientPortals): those
// bound before the block failed, also when PostgreSQL skipped their
// Close after an error, one closed and bound again, and a failed
// Query's; not those bound in the unit, nor a ROLLBACK bound in an earlier
// unit of the failed block.
func TestDeadPortalsOfAFailedBlock(t *testing.T) {
	var p clientPortals
	unit := func(status byte, failedBefore bool) { p.atUnit(failedBefore, status) }
	unit('T', false)
	p.bound("p")
	p.bound("gone")
	p.closed("gone")
	p.bound("again")
	p.closed("again")
	p.bound("again") // closed, then bound anew
	unit('T', false) // (the unit did not fail: "gone" is gone)
	p.closed("p")    // skipped by PostgreSQL: the unit fails
	p.query()
	unit('E', true)
	for portal, dead := range map[string]bool{"p": true, "": true, "gone": false, "again": true, "ordo_exec": true, "never": false} {
		if p.dead(portal) != dead {
			t.Errorf("portal %q dead %v, want %v", portal, !dead, dead)
		}
	}
	p.bound("r") // a ROLLBACK bound in the failed block
	if p.dead("r") {
		t.Error("a portal bound in the unit taken for dead")
	}
	unit('E', false)
	if p.dead("r") || !p.dead("p") {
		t.Error("after the unit that bound r without failing: r dead or p alive")
	}
	unit('I', false)
	if p.dead("p") || len(p.tx) != 0 {
		t.Error("portals kept after the transaction ended")
	}

	// A pipeline on the unnamed portal (pgx's batches) keeps one event;
	// many names, once over, leave no room kept.
	for range 10000 {
		p.bound("")
	}
	if len(p.unit) != 1 {
		t.Errorf("%d events for one portal bound again and again", len(p.unit))
	}
	for i := range 10000 {
		p.bound("c" + strconv.Itoa(i))
	}
	unit('I', false)
	if cap(p.unit) > keepEvents {
		t.Errorf("room for %d events kept after the unit", cap(p.unit))
	}
}

// TestPendingPortals: the portals of the batch so far that are bound and
// not executed (clientPortals.pending, pendingBut), which a Sync of
// Ordo's mid-batch would end their transaction under; an Execute alone
// binds nothing.
func TestPendingPortals(t *testing.T) {
	var p clientPortals
	p.atUnit(false, 'T')
	p.bound("a")
	p.bound("b")
	p.executed("a") // not next to a's Bind
	if p.pending("a") || !p.pending("b") || p.pending("never") {
		t.Errorf("pending a %v b %v never %v, want false true false", p.pending("a"), p.pending("b"), p.pending("never"))
	}
	if p.pendingBut("b") || !p.pendingBut("a") || !p.pendingBut("\x00") {
		t.Error("pendingBut: only b is pending")
	}
	p.closed("b")
	if p.pendingBut("\x00") {
		t.Error("a closed portal taken for pending")
	}
	p.bound("")
	p.executed("")
	p.bound("") // a pipeline on the unnamed portal: bound again
	if !p.pending("") || len(p.unit) != 5 {
		t.Errorf("unnamed pending %v, %d events", p.pending(""), len(p.unit))
	}
	p.executed("x") // a portal of an earlier unit
	p.atUnit(false, 'T')
	if !p.tx["a"] || p.tx["b"] || !p.tx[""] || p.tx["x"] {
		t.Errorf("portals of the transaction %v, want a and the unnamed one", p.tx)
	}
	if p.pending("") || p.pendingBut("\x00") {
		t.Error("pending portals kept after their unit")
	}
}

// TestTrackerKnowsDeclaredTypes: the parameter types a statement is held
// with are those of the Parse PostgreSQL accepted, not of the client's
// last Parse of the name, which may have been refused or skipped.
func TestTrackerKnowsDeclaredTypes(t *testing.T) {
	const float8, int8 = 701, 20
	var u unnamedTracker
	send, reply := u.sendAll, u.replyAll
	want := func(step, name, sql string, types []uint32, ok bool) {
		t.Helper()
		gs, gt, gok := u.declaredTypes(name)
		if gs != sql || !slices.Equal(gt, types) || gok != ok {
			t.Fatalf("%s: %q is (%q, %v, ok %v), want (%q, %v, %v)", step, name, gs, gt, gok, sql, types, ok)
		}
	}
	rfq := &pgproto3.ReadyForQuery{TxStatus: 'I'}
	const q = "select v from t where id = $1"
	failing := []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "bad", Query: "select 1/0"}, &pgproto3.Bind{PreparedStatement: "bad"}, &pgproto3.Execute{}}
	failed := []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.ErrorResponse{Code: "22012"}, rfq}

	want("at start", "", "", nil, false)
	send(&pgproto3.Parse{Query: q, ParameterOIDs: []uint32{float8}}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	want("unnamed parsed", "", q, []uint32{float8}, true)
	send(append(failing, &pgproto3.Parse{Query: q, ParameterOIDs: []uint32{int8}}, &pgproto3.Sync{})...)
	reply(failed...)
	want("unnamed Parse skipped", "", q, []uint32{float8}, true)

	send(&pgproto3.Parse{Name: "s", Query: q, ParameterOIDs: []uint32{float8}}, &pgproto3.Sync{})
	reply(&pgproto3.ParseComplete{}, rfq)
	want("named parsed", "s", q, []uint32{float8}, true)
	send(&pgproto3.Parse{Name: "s", Query: q, ParameterOIDs: []uint32{int8}}, &pgproto3.Sync{})
	reply(&pgproto3.ErrorResponse{Code: "42P05"}, rfq)
	want("named Parse refused", "s", q, []uint32{float8}, true)
	send(append(failing, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Parse{Name: "s", Query: q, ParameterOIDs: []uint32{int8}}, &pgproto3.Sync{})...)
	reply(failed...)
	want("named Close and Parse skipped", "s", q, []uint32{float8}, true)

	// Names read from PostgreSQL (after SQL's PREPARE, a DO block…): a
	// statement the client parsed keeps its Parse's types, and the others
	// take those PostgreSQL resolved, if read.
	send(&pgproto3.Query{String: "DO $$ BEGIN END $$"})
	reply(&pgproto3.CommandComplete{CommandTag: []byte("DO")}, rfq)
	want("forgotten after a DO block", "s", "", nil, false)
	u.learnNamed(map[string]string{"s": q, "p": "PREPARE p(int8) AS " + q, "t": "select $1"},
		map[string]string{"p": "PREPARE p AS SELECT 1"}, map[string][]uint32{"s": {int8}, "p": {int8}})
	want("learned, parsed by the client", "s", q, []uint32{float8}, true)
	want("learned, made by SQL's PREPARE", "p", "PREPARE p(int8) AS "+q, []uint32{int8}, true)
	want("learned without types", "t", "", nil, false)
	want("a name not held", "x", "", nil, false)

	// A statement under the name with another text is not the one parsed.
	send(&pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
	reply(&pgproto3.CloseComplete{}, rfq)
	u.learnNamed(map[string]string{"s": q}, map[string]string{"s": q}, nil)
	want("learned after its Close, made by SQL's PREPARE", "s", "", nil, false)
}

// TestTrackerParseAfterLearnedNames: a Parse accepted after the names
// were read from PostgreSQL (learnNamed made the map of names) is kept
// with its types (it panicked: the map of parsed statements was made
// only with the names').
func TestTrackerParseAfterLearnedNames(t *testing.T) {
	var u unnamedTracker
	u.learnNamed(map[string]string{"p": "PREPARE p AS SELECT 1"}, map[string]string{"p": "PREPARE p AS SELECT 1"}, nil)
	u.sendAll(&pgproto3.Parse{Name: "s", Query: "select $1", ParameterOIDs: []uint32{20}}, &pgproto3.Sync{})
	u.replyAll(&pgproto3.ParseComplete{}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if sql, types, ok := u.declaredTypes("s"); !ok || sql != "select $1" || !slices.Equal(types, []uint32{20}) {
		t.Fatalf("s: %q %v %v", sql, types, ok)
	}
}

// TestTrackerInjectedParse: ParseHere's Parse of the unnamed statement
// ahead of the client's Bind: its ParseComplete is dropped, the tracker
// holds its text from then on; failed (in a failed block), its error is
// the client's and the unnamed statement is gone, as PostgreSQL drops it.
func TestTrackerInjectedParse(t *testing.T) {
	var u unnamedTracker
	rfq := &pgproto3.ReadyForQuery{TxStatus: 'T'}
	u.sent(&pgproto3.Parse{Query: "BEGIN ISOLATION LEVEL REPEATABLE READ"})
	u.sent(&pgproto3.Sync{})
	for _, m := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, rfq} {
		u.reply(m)
	}
	u.sentInjectedParse(&pgproto3.Parse{Query: "begin"})
	u.sent(&pgproto3.Bind{})
	u.sent(&pgproto3.Execute{})
	u.sent(&pgproto3.Sync{})
	if drop, _, _, _ := u.reply(&pgproto3.ParseComplete{}); !drop {
		t.Fatal("the injected Parse's ParseComplete was relayed")
	}
	if p, client := u.current(); p == nil || p.Query != "begin" || client != "" {
		t.Fatalf("the unnamed statement after the injected Parse: %+v, the client's %q", p, client)
	}
	for _, m := range []pgproto3.BackendMessage{&pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, rfq} {
		if drop, _, _, _ := u.reply(m); drop {
			t.Fatalf("the client's %T was dropped", m)
		}
	}
	if !u.answered() {
		t.Fatal("a message is still awaiting its reply")
	}

	u.sentInjectedParse(&pgproto3.Parse{Query: "begin"})
	u.sent(&pgproto3.Bind{})
	u.sent(&pgproto3.Execute{})
	u.sent(&pgproto3.Sync{})
	if drop, _, _, _ := u.reply(&pgproto3.ErrorResponse{Code: "25P02"}); drop {
		t.Fatal("the injected Parse's error was dropped")
	}
	if p, _ := u.current(); p != nil {
		t.Fatal("a failed Parse of the unnamed statement leaves none")
	}
	if drop, _, _, _ := u.reply(&pgproto3.ReadyForQuery{TxStatus: 'E'}); drop || !u.answered() {
		t.Fatal("the Sync's ReadyForQuery did not end the batch")
	}
}

// TestTrackerClientTextOfARewrittenParse: the tracker reports the text
// the client sent for the unnamed statement PostgreSQL holds where Ordo
// rewrote it, also after a later Parse of it was skipped (an error
// earlier in its batch): the session analyzes the client's text (Ordo's
// says another isolation level: session fuzzer, seed 1796173496328532457).
func TestTrackerClientTextOfARewrittenParse(t *testing.T) {
	var u unnamedTracker
	u.sentAs(&pgproto3.Parse{Query: "BEGIN ISOLATION LEVEL REPEATABLE READ"}, "begin")
	u.sent(&pgproto3.Parse{Name: "s1", Query: "select 1"})
	u.sent(&pgproto3.Parse{Query: "select 2"})
	u.sent(&pgproto3.Sync{})
	for _, m := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.ErrorResponse{Code: "42P05"}, &pgproto3.ReadyForQuery{TxStatus: 'I'}} {
		u.reply(m)
	}
	if p, client := u.current(); p == nil || p.Query != "BEGIN ISOLATION LEVEL REPEATABLE READ" || client != "begin" {
		t.Fatalf("held after a skipped Parse: %+v, the client's %q", p, client)
	}
	u.sent(&pgproto3.Parse{Query: "select 3"})
	u.sent(&pgproto3.Sync{})
	for _, m := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}} {
		u.reply(m)
	}
	if p, client := u.current(); p == nil || p.Query != "select 3" || client != "" {
		t.Fatalf("held after a Parse Ordo did not rewrite: %+v, the client's %q", p, client)
	}
}

// TestTrackerPlacesWarnings: Backend.Warn's warning goes with the next
// Query or Bind sent (a Bind's with its portal's next Execute), before
// that statement's CommandComplete or error and with no other reply;
// Unwarn drops only the notice named, once; a portal bound again, or
// ended with its transaction, forgets its warning.
func TestTrackerPlacesWarnings(t *testing.T) {
	var u unnamedTracker
	warn := &pgproto3.NoticeResponse{Severity: "WARNING", Code: "25P01", Message: "there is no transaction in progress"}
	cc := &pgproto3.CommandComplete{CommandTag: []byte("COMMIT")}
	// A Bind's warning waits for its portal's Execute; a Sync before
	// it (SyncHere's) takes nothing.
	u.nextNotice = &noticeEdit{add: warn}
	u.sendAll(&pgproto3.Sync{}, &pgproto3.Parse{Query: "commit"}, &pgproto3.Bind{DestinationPortal: "p"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{})
	if u.nextNotice != nil {
		t.Fatal("the Bind did not take the warning")
	}
	u.replyAll(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	for _, m := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}} {
		if _, _, _, w := u.reply(m); w != nil {
			t.Fatalf("warning before %T", m)
		}
	}
	if _, _, _, w := u.reply(cc); w != warn {
		t.Fatal("no warning before the Execute's CommandComplete")
	}
	u.replyAll(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	// A Query's, before its error; Unwarn's notice dropped once.
	u.nextNotice = &noticeEdit{add: warn, drop: "25001", dropMsg: "there is already a transaction in progress"}
	u.sendAll(&pgproto3.Query{String: "begin"})
	extra := &pgproto3.NoticeResponse{Code: "25001", Message: "there is already a transaction in progress"}
	if u.dropNotice(&pgproto3.NoticeResponse{Code: "25001", Message: "another"}) || !u.dropNotice(extra) || u.dropNotice(extra) {
		t.Fatal("Unwarn dropped other than the notice named, once")
	}
	if _, _, _, w := u.reply(&pgproto3.ErrorResponse{Code: "23505"}); w != warn {
		t.Fatal("no warning before the Query's error")
	}
	u.replyAll(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	// A portal bound again without one, or ended with its transaction
	// (the session's readyStatus tells the tracker at a ReadyForQuery
	// 'I'), forgets it.
	for _, again := range []pgproto3.FrontendMessage{&pgproto3.Bind{DestinationPortal: "p"}, &pgproto3.Sync{}} {
		u.nextNotice = &noticeEdit{add: warn}
		u.sendAll(&pgproto3.Bind{DestinationPortal: "p"}, again)
		u.replyAll(&pgproto3.BindComplete{})
		if _, ok := again.(*pgproto3.Bind); ok {
			u.replyAll(&pgproto3.BindComplete{})
		} else {
			u.replyAll(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			u.transactionEnded()
		}
		u.sendAll(&pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{})
		if _, _, _, w := u.reply(cc); w != nil {
			t.Fatalf("after %T: the portal kept its warning", again)
		}
		u.replyAll(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	}
}
