package wire

import "strings"

// clientPortals follows the client's portals for the two things Ordo must
// know of them; it must never change what the client sees of a portal
// except to answer an Execute PostgreSQL would crash on.
//
// 1. Whether the client's unnamed portal may be one it executes later
// (unnamedLater): suspended by an Execute with a row limit, or bound and
// not executed before its Sync, in a transaction that may still be open.
// An Exec then runs under names of Ordo's (exec1), as a Query would drop
// the portal (a portal suspended in a block outlives its Sync).
//
// 2. The portals of a failed block (dead). After an error aborts a block,
// PostgreSQL keeps its portals until the ROLLBACK, but frees what some of
// them point at (their plans, or the text of a Query whose statement
// failed, kept under the unnamed name), and an Execute of one reads that
// memory before it finds the portal failed: a client sending one crashed
// the server (PostgreSQL 15 and 18, TestExecuteOfADeadPortalIsAnsweredByOrdo).
// Such an Execute is answered by Ordo with PostgreSQL's error for it
// (errAborted, 25P02). Stale entries cost a client only 25P02 where
// PostgreSQL says 34000.
//
// 3. Which portals of the batch so far are bound and not executed yet
// (pending, pendingBut): a Sync of Ordo's in the middle of the batch
// (SyncHere) would end their transaction under them.
//
// It is used on the session goroutine only.
type clientPortals struct {
	unnamedLater bool
	// unit: the client's Binds, Executes and Closes of portals in this
	// unit, in order (those of one name in a row as one event), taken into tx at
	// the next unit (atUnit): the common unit, an autocommit statement,
	// touches no map, and a pipeline of statements on the unnamed portal
	// keeps one event. tx: the portals bound (and "", after a failed
	// Query) in the open transaction, as of the unit's start. live: those
	// bound by a unit that began in the failed block and did not fail (a
	// COMMIT or ROLLBACK, which PostgreSQL runs there).
	unit     []portalEvent
	tx, live map[string]bool
	// unitInE: the unit began in a failed block. queryInUnit: the unit has
	// a Query of the client's. A Query that did not fail forgets nothing:
	// one without a statement (an empty one, or a comment, pgx's ping)
	// drops no portal.
	unitInE, queryInUnit bool
}

// portalEvent is the client's Binds, Executes and Closes of one portal,
// one after another in a unit: whether one was a Bind, whether the last
// Bind or Close was a Close, and whether the portal is bound and not
// executed since (pending). In a unit that did not fail only the last
// Bind or Close counts; in one that failed, PostgreSQL may have skipped
// any of them (atUnit). An Execute alone binds nothing.
type portalEvent struct {
	name                   string
	bound, closed, pending bool
}

// What the client did to a portal (clientPortals.event).
type portalOp uint8

const (
	opBind portalOp = iota
	opExecute
	opClose
)

// keepEvents is the most events a unit's slice keeps room for after it.
const keepEvents = 256

// atUnit is called at the first message of a unit, every reply to the
// unit before it received: failed tells whether that unit failed, status
// is the transaction status its ReadyForQuery reported. PostgreSQL skips
// the messages after an error up to the Sync, and which ones it skipped
// is not known here: of a failed unit, every Bind is taken for one that
// ran, and no Close.
func (p *clientPortals) atUnit(failed bool, status byte) {
	if status == 'I' {
		clear(p.tx)
		clear(p.live)
		p.unnamedLater = false // it ended with its transaction
	} else {
		for _, e := range p.unit {
			switch {
			case failed:
				if e.bound {
					p.note(e.name)
				}
			case e.closed:
				delete(p.tx, e.name)
				delete(p.live, e.name)
			case e.bound:
				p.note(e.name)
				if p.unitInE {
					if p.live == nil {
						p.live = map[string]bool{}
					}
					p.live[e.name] = true
				}
			}
		}
		if p.queryInUnit && failed {
			p.failedQuery()
		}
		if status == 'T' {
			clear(p.live)
		}
	}
	p.queryInUnit = false
	if cap(p.unit) > keepEvents {
		p.unit = nil
	} else {
		clear(p.unit) // (no names kept alive)
		p.unit = p.unit[:0]
	}
	p.unitInE = status == 'E'
}

// query notes a Query of the client's in this unit.
func (p *clientPortals) query() { p.queryInUnit = true }

// bound notes a portal the client bound in this unit.
func (p *clientPortals) bound(name string) { p.event(name, opBind) }

// executed notes an Execute of a portal of the client's.
func (p *clientPortals) executed(name string) { p.event(name, opExecute) }

// closed notes a Close of a portal of the client's.
func (p *clientPortals) closed(name string) { p.event(name, opClose) }

func (p *clientPortals) event(name string, op portalOp) {
	n := len(p.unit)
	if n == 0 || p.unit[n-1].name != name {
		p.unit = append(p.unit, portalEvent{name: name})
		n++
	}
	e := &p.unit[n-1]
	switch op {
	case opBind:
		e.bound, e.closed, e.pending = true, false, true
	case opExecute:
		e.pending = false
	case opClose:
		e.closed, e.pending = true, false
	}
}

// pending reports whether portal was bound in this unit and not executed
// or closed since.
func (p *clientPortals) pending(portal string) bool {
	for i := len(p.unit) - 1; i >= 0; i-- {
		if e := p.unit[i]; e.name == portal {
			return e.pending
		}
	}
	return false
}

// pendingBut reports whether a portal other than but was bound in this
// unit and not executed or closed since. It is for a Sync of Ordo's in
// the middle of a batch (rare): it allocates.
func (p *clientPortals) pendingBut(but string) bool {
	var seen map[string]bool
	for i := len(p.unit) - 1; i >= 0; i-- {
		e := p.unit[i]
		if seen[e.name] {
			continue // an earlier event of a portal whose last one counts
		}
		if e.pending && e.name != but {
			return true
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[e.name] = true
	}
	return false
}

// failedQuery notes the unnamed portal a failed Query (the client's or
// an Exec's) leaves in the transaction.
func (p *clientPortals) failedQuery() { p.note("") }

func (p *clientPortals) note(name string) {
	if p.tx == nil {
		p.tx = map[string]bool{}
	}
	p.tx[name] = true
}

// dead reports whether an Execute of portal, in this unit, would run a
// portal that the abort of a failed block left behind: one of the
// client's, or one of Ordo's (an Exec's or an injected BEGIN's, which a
// failed statement of Ordo's leaves too). A portal bound in this unit is
// not: the Bind came after the failure.
func (p *clientPortals) dead(portal string) bool {
	if !p.unitInE || !p.tx[portal] && !strings.HasPrefix(portal, "ordo_") || p.live[portal] {
		return false
	}
	for i := len(p.unit) - 1; i >= 0; i-- {
		if e := p.unit[i]; e.name == portal && e.bound {
			return false
		}
	}
	return true
}
