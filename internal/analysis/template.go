package analysis

import "strings"

// A template is the analysis of one text reused for every text with the
// same fingerprint (fingerprint.go), search path and catalog version: the
// literals' values are bound into it the way Bind binds $n parameters.
//
// It exists only for statements whose analysis depends on their literals
// in one way the template can follow: a key value (vConst) taken from a
// literal, from a literal with a minus sign folded into it, or from a
// TRUE/FALSE keyword (part of the fingerprint). Array literals ('{1,2}'
// in = ANY) decide how many values a column has, so the template holds
// their text and matches only texts with the same one ("pinned"). Any
// other constant, one whose value cannot be derived from its literal
// exactly as pg_query reported it, more than one statement, or a
// statement kind whose analysis keeps text (SET, transaction control,
// EXPLAIN options, DDL and its replay text, PREPARE) makes no template:
// such texts are analyzed from scratch.
type template struct {
	stmt *Statement // nil: this fingerprint is always analyzed from its text
	// The statement is sql[start : len(sql)-tail] of any matching text.
	start, tail int
	binds       []litBind
	pins        []litPin
	version     uint64
}

// litBind says which literal gives the value at one position of the
// statement's accesses.
type litBind struct {
	acc     int
	col     int // index into the access' pk, or -1 for its granule
	idx     int
	lit     int
	negated bool
}

// litPin is a literal whose text must be the same in every matching text.
type litPin struct {
	lit  int
	text string
}

// templatable lists the statements a template may stand for: queries and
// DML, whose analysis reads their literals only as key values.
var templatable = map[string]bool{"SelectStmt": true, "InsertStmt": true, "UpdateStmt": true, "DeleteStmt": true, "MergeStmt": true}

// newTemplate makes the template of stmts, the fresh analysis of sql
// whose literals are lits; stmt nil when it cannot stand for other texts.
func newTemplate(sql string, lits []literal, stmts []*Statement, version uint64) *template {
	none := &template{version: version}
	if len(stmts) != 1 {
		return none
	}
	st := stmts[0]
	if !templatable[st.Tag] || st.Txn != nil || st.Setting != nil || st.Prepared != nil ||
		st.Explain || st.Rewrite != "" || st.Replay != "" || st.Notice != "" {
		return none
	}
	t := &template{stmt: st, start: st.Offset, tail: len(sql) - st.Offset - len(st.SQL), version: version}
	if len(lits) > 0 && (t.start > lits[0].start || st.Offset+len(st.SQL) < lits[len(lits)-1].end) {
		return none
	}
	at := make(map[int]int, len(lits)) // literal start → index
	for i, l := range lits {
		at[l.start] = i
	}
	pinned := map[int]bool{}
	for _, loc := range st.pinned {
		i, found := at[int(loc)]
		if !found {
			return none
		}
		if !pinned[i] {
			pinned[i] = true
			t.pins = append(t.pins, litPin{lit: i, text: sql[lits[i].start:lits[i].end]})
		}
	}
	ok := true
	eachConst(st, func(acc, col, idx int, v val) {
		if !ok {
			return
		}
		loc := int(v.loc)
		if v.elem {
			if i, found := at[loc]; !found || !pinned[i] {
				ok = false
			}
			return
		}
		if i, found := at[loc]; found {
			switch {
			case lits[i].value(sql, false) == v.text:
				t.binds = append(t.binds, litBind{acc: acc, col: col, idx: idx, lit: i})
			case lits[i].class != litStr && lits[i].class != litDollar && lits[i].value(sql, true) == v.text:
				t.binds = append(t.binds, litBind{acc: acc, col: col, idx: idx, lit: i, negated: true})
			default:
				ok = false
			}
			return
		}
		if loc >= 0 && loc < len(sql) && sql[loc] == '-' {
			// A minus sign PostgreSQL folded into the number after it.
			if i, found := at[skipSpace(sql, loc+1)]; found && (lits[i].class == litInt || lits[i].class == litNum) && lits[i].value(sql, true) == v.text {
				t.binds = append(t.binds, litBind{acc: acc, col: col, idx: idx, lit: i, negated: true})
				return
			}
			ok = false
			return
		}
		if loc >= 0 && (v.text == "true" || v.text == "false") && len(sql)-loc >= len(v.text) && strings.EqualFold(sql[loc:loc+len(v.text)], v.text) {
			return // the keyword is part of the fingerprint
		}
		ok = false
	})
	if !ok {
		return none
	}
	return t
}

// skipSpace returns the first position at or after i that is neither
// whitespace nor inside a comment.
func skipSpace(sql string, i int) int {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			i = lineCommentEnd(sql, i)
		case strings.HasPrefix(sql[i:], "/*"):
			end, ok := blockCommentEnd(sql, i)
			if !ok {
				return len(sql)
			}
			i = end
		default:
			return i
		}
	}
	return i
}

// eachConst calls f for every constant key value of st's accesses.
func eachConst(st *Statement, f func(acc, col, idx int, v val)) {
	for a := range st.acc {
		for c, vs := range st.acc[a].pk {
			for i, v := range vs {
				if v.kind == vConst {
					f(a, c, i, v)
				}
			}
		}
		for i, v := range st.acc[a].granule {
			if v.kind == vConst {
				f(a, -1, i, v)
			}
		}
	}
}

// instantiate returns the template's analysis for sql, a text with the
// same fingerprint whose literals are lits, or nil when a pinned literal
// differs.
func (t *template) instantiate(sql string, lits []literal) []*Statement {
	for _, p := range t.pins {
		l := lits[p.lit]
		if sql[l.start:l.end] != p.text {
			return nil
		}
	}
	src := t.stmt
	st := *src
	st.SQL = sql[t.start : len(sql)-t.tail]
	st.acc = make([]access, len(src.acc))
	copy(st.acc, src.acc)
	if len(t.binds) > 0 {
		for a := range st.acc {
			acc := &st.acc[a]
			if acc.pk != nil {
				pk := make([][]val, len(acc.pk))
				for c, vs := range acc.pk {
					pk[c] = append([]val(nil), vs...)
				}
				acc.pk = pk
			}
			acc.granule = append([]val(nil), acc.granule...)
		}
		for _, b := range t.binds {
			v := lits[b.lit].value(sql, b.negated)
			if b.col < 0 {
				st.acc[b.acc].granule[b.idx].text = v
			} else {
				st.acc[b.acc].pk[b.col][b.idx].text = v
			}
		}
	}
	// The footprint is computed by Bind, when a session needs it (not for
	// reads under protocols that do not certify them).
	st.static = nil
	return []*Statement{&st}
}
