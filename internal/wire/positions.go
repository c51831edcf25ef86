package wire

import "math"

// An error's position (ErrorResponse.Position) is a character of the
// query string PostgreSQL received, counted from 1. Where that is not the
// client's text, the relay makes it the client's: a piece of a split
// query (Split.Offsets) counts from the piece's start, and a Rewrite
// (Statement.Replaced) put other text in place of some statements.

// Replaced says that a Rewrite put Now characters in place of Was
// characters of the client's text, from its character At (from 0).
type Replaced struct{ At, Was, Now int }

// positions turns positions in the text PostgreSQL received into the
// client's: replaced maps the rewritten text back to the text the hooks
// saw, which begins at character shift of the client's query string.
type positions struct {
	shift    int
	replaced []Replaced
}

// client returns the client's position for PostgreSQL's p (p > 0): one in
// text a Rewrite put in is the replaced statement's first character.
func (ps *positions) client(p int32) int32 {
	at, d := int(p)-1, 0 // d: characters the rewrite added before at
	for _, r := range ps.replaced {
		start := r.At + d
		if at < start {
			break
		}
		if at < start+r.Now {
			at, d = r.At, 0
			break
		}
		d += r.Now - r.Was
	}
	return int32(min(at-d+ps.shift+1, math.MaxInt32))
}

// notePositions notes how the errors of the Query about to be sent map to
// the client's text, which begins at character shift of the client's
// string (a piece of a split query), if it is not the client's own text.
// Only with nothing else in flight: the errors that come before the next
// ReadyForQuery are then this Query's. (A rewritten Query pipelined after
// others keeps PostgreSQL's positions.)
func (ss *session) notePositions(shift int) {
	if shift == 0 && len(ss.replaced) == 0 || ss.outstanding.Load() != 0 {
		return
	}
	ss.positions.Store(&positions{shift: shift, replaced: ss.replaced})
}
