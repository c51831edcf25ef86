package session

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"strconv"
)

// Sequence changes are not decoded (PostgreSQL 15's logical decoding does
// not carry them), and nextval is deliberately local (see
// internal/sequences). setval is different: it says where a sequence
// continues, typically after rows with explicit ids were loaded (pg_dump
// ends every table with one), and every node must then continue above that
// point. So a transaction that calls setval replicates the new positions of
// the sequences it changed, as statements replayed on every node, followed
// by the normalization every DDL transaction runs (each node's sequence
// goes back to its own residue class, above the new position and above
// every value in the column that owns it).

// seqStateSQL lists every user sequence the role may read, with its
// position: the last value handed out, whether it was (is_called), and
// whether the sequence ascends.
const seqStateSQL = `SELECT sname, lastv::text, called, up FROM _ordo.sequence_state()`

// seqPos is a sequence's position.
type seqPos struct {
	last   int64
	called bool // last was handed out
	up     bool // it ascends
}

// before reports whether p hands out values before q does (its next value
// is lower, for an ascending sequence).
func (p seqPos) before(q seqPos) bool {
	return p.last < q.last || p.last == q.last && !p.called && q.called
}

// seqState maps a sequence to its position.
type seqState map[string]seqPos

func (s *session) sequenceState(ctx context.Context) (seqState, error) {
	res, err := s.be.Exec(ctx, seqStateSQL)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if s.bruteForced(res) {
			return nil, errBruteForce
		}
		return nil, res.Err
	}
	st := make(seqState, len(res.Rows))
	for _, r := range res.Rows {
		if len(r) != 4 {
			continue
		}
		v, err := strconv.ParseInt(r[1], 10, 64)
		if err != nil {
			continue
		}
		st[r[0]] = seqPos{last: v, called: r[2] == "t", up: r[3] == "t"}
	}
	return st, nil
}

// noteSequences records the sequences' positions before the transaction's
// first setval; the backend must be at a boundary.
func (s *session) noteSequences(ctx context.Context) error {
	if s.tx.seqBefore != nil {
		return nil
	}
	st, err := s.sequenceState(ctx)
	if err != nil {
		return err
	}
	s.tx.seqBefore = st
	return nil
}

// sequenceChanges adds the replay of the transaction's sequence changes to
// its DDL; it reports whether there were any.
func (s *session) sequenceChanges(ctx context.Context) (bool, error) {
	if s.tx.seqBefore == nil {
		return false, nil
	}
	after, err := s.sequenceState(ctx)
	if err != nil {
		return false, err
	}
	replay := sequenceReplay(s.tx.seqBefore, after)
	for _, sql := range replay {
		s.tx.ddl = append(s.tx.ddl, ddlStmt{sql: sql}) // Ordo's own: no event trigger sees it
	}
	return len(replay) > 0, nil
}

// sequenceReplay returns the statements that carry the sequence changes
// made since before to the other nodes, as setval to the position the
// transaction left: exactly for a sequence moved back (setval to a lower
// value, or to the same one not yet handed out) and for a descending one
// (those are not normalized); for one moved forward (setval, or nextval
// in the same transaction), only on a node whose sequence is not already
// further on. Sequences created or dropped since are DDL, replicated as
// such. Every node then normalizes its sequences into its own class
// (AfterDDL).
func sequenceReplay(before, after seqState) []string {
	var out []string
	for name, p := range after {
		old, ok := before[name]
		if !ok || old == p {
			continue
		}
		set := fmt.Sprintf("SELECT pg_catalog.setval(%s, %d, %t)", quoteLiteral(name), p.last, p.called)
		if !p.up || p.before(old) {
			out = append(out, set)
			continue
		}
		// numeric: last_value + 1 may pass bigint's maximum.
		next := new(big.Int).SetInt64(p.last)
		if p.called {
			next.Add(next, big.NewInt(1))
		}
		out = append(out, fmt.Sprintf("%s FROM %s WHERE CASE WHEN is_called THEN last_value::numeric + 1 ELSE last_value END < %s", set, name, next))
	}
	sort.Strings(out)
	return out
}

func quoteLiteral(s string) string {
	b := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			b = append(b, '\'')
		}
		b = append(b, s[i])
	}
	return string(append(b, '\''))
}
