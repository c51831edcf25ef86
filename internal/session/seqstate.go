package session

import (
	"context"
	"fmt"
	"math"
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
// position: the last value handed out and whether it was (is_called).
const seqStateSQL = `SELECT sname, lastv::text, called FROM _ordo.sequence_state()`

// seqState maps a sequence to its next value: the lowest value that no
// setval or nextval of it has handed out (last_value + 1 once called,
// last_value before).
type seqState map[string]int64

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
		if len(r) != 3 {
			continue
		}
		v, err := strconv.ParseInt(r[1], 10, 64)
		if err != nil {
			continue
		}
		if r[2] == "t" && v < math.MaxInt64 {
			v++
		}
		st[r[0]] = v
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
// made since before to the other nodes: a sequence moved back (setval to
// a lower value, or to the same one with is_called false) is set exactly;
// one moved forward (setval, or nextval in the same transaction) is only
// ever moved forward on the other nodes, which may already be further on.
// Sequences created or dropped since are DDL, replicated as such. Every
// node then normalizes its sequences into its own class (AfterDDL).
func sequenceReplay(before, after seqState) []string {
	var out []string
	for name, next := range after {
		old, ok := before[name]
		if !ok || old == next {
			continue
		}
		reg := quoteLiteral(name)
		if next < old {
			out = append(out, fmt.Sprintf("SELECT pg_catalog.setval(%s, %d, false)", reg, next))
		} else {
			out = append(out, fmt.Sprintf("SELECT pg_catalog.setval(%s, greatest(%d, CASE WHEN is_called THEN last_value + 1 ELSE last_value END), false) FROM %s", reg, next, name))
		}
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
