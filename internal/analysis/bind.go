package analysis

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

// Param is one bound parameter value as the client sent it in Bind.
type Param struct {
	// Value is nil for NULL.
	Value []byte
	// Binary is set for format code 1.
	Binary bool
	// Declared is the type the statement's Parse declared for it (an
	// OID), 0 if it left it to PostgreSQL, which then gives it the
	// column's type where it is compared with a key column. A value
	// declared of another type is compared as that type (5.5::float8 =
	// an integer column), and its bytes are not the column type's: it
	// makes no key; so does one whose declared type is not known
	// (TypeUnknown).
	Declared uint32
}

// TypeUnknown, as a Param's Declared, says that what the Parse of its
// statement declared is not known: its value makes no key.
const TypeUnknown = ^uint32(0)

// ErrParams is returned by Statement.Bind when fewer parameters are given
// than the statement uses.
var ErrParams = errors.New("analysis: missing parameters")

type valKind uint8

const (
	vConst      valKind = iota + 1 // a literal, text in val.text
	vParam                         // $n
	vParamArray                    // = ANY($n): every element of the array $n
)

// val is one value a predicate fixes a column to.
type val struct {
	kind  valKind
	text  string
	param int
	// loc is the byte offset in the analyzed text of the constant a vConst
	// came from (pg_query's A_Const location: the literal, its folded
	// minus sign or a TRUE/FALSE keyword), -1 if unknown; elem marks an
	// element of an array literal at loc. The literal-independent cache
	// (template.go) binds them from another text's literals.
	loc  int32
	elem bool
	// rng marks the bounds of a range ("column BETWEEN lo AND hi", "column
	// >= lo AND column < hi"): a lower bound and the upper bound right
	// after it in the same list stand for every integer between them
	// (values); a bound alone stands for nothing values accepts.
	rng rangeBound
}

// rangeBound says whether a val is a bound of a range, and which.
type rangeBound uint8

const (
	rangeLo     rangeBound = iota + 1 // col >= v, BETWEEN v AND …
	rangeLoExcl                       // col > v
	rangeHi                           // col <= v, BETWEEN … AND v
	rangeHiExcl                       // col < v
)

func (b rangeBound) lower() bool { return b == rangeLo || b == rangeLoExcl }

// flipped is the bound of "v op col" for the bound of "col op v".
func (b rangeBound) flipped() rangeBound {
	switch b {
	case rangeLo:
		return rangeHi
	case rangeLoExcl:
		return rangeHiExcl
	case rangeHi:
		return rangeLo
	case rangeHiExcl:
		return rangeLoExcl
	}
	return b
}

// access is one table a statement reads or writes, with what its
// predicates fix.
type access struct {
	table     *catalog.Relation
	read      bool
	write     bool
	tableOnly bool // no predicate may refine it (view bases, MERGE, COPY)
	// readTable: the read is of the whole table even though the predicted
	// writes are finer (INSERT … ON CONFLICT whose arbiter may be any
	// unique index, not only the primary key).
	readTable bool
	pk        [][]val // per primary key column; a nil entry: not fixed
	granule   []val   // granule column values; nil: not fixed
}

func (a *access) usesParams() bool {
	if a.tableOnly {
		return false
	}
	for _, vs := range a.pk {
		for _, v := range vs {
			if v.kind != vConst {
				return true
			}
		}
	}
	for _, v := range a.granule {
		if v.kind != vConst {
			return true
		}
	}
	return false
}

// Bind returns the statement's footprint with params as the values of $1…$n.
// Statements analyzed from their own text without parameters return a
// shared, precomputed footprint; those from a template (template.go)
// compute theirs here.
// Bind never fails for a value it cannot interpret: it uses a coarser key.
func (s *Statement) Bind(params []Param) (*Footprint, error) {
	if len(params) < s.NumParams {
		return nil, fmt.Errorf("%w: statement uses $%d, %d given", ErrParams, s.NumParams, len(params))
	}
	if s.static != nil {
		return s.static, nil
	}
	return s.footprint(params), nil
}

func (s *Statement) footprint(params []Param) *Footprint {
	f := &Footprint{All: s.ReadsAll, WritesAll: s.WritesAll}
	for i := range s.acc {
		a := &s.acc[i]
		if a.read && !f.All {
			if a.readTable {
				f.Reads = append(f.Reads, txn.TableKey(a.table.Name.Schema, a.table.Name.Name))
			} else {
				f.Reads = a.keys(params, s.limit, f.Reads)
			}
		}
		if a.write && !f.WritesAll {
			f.Writes = a.keys(params, s.limit, f.Writes)
		}
	}
	f.Reads = dedupe(f.Reads)
	f.Writes = dedupe(f.Writes)
	return f
}

func dedupe(ks []txn.Key) []txn.Key {
	if len(ks) < 2 {
		return ks
	}
	// Table keys absorb finer keys of the same table.
	var tables map[txn.Key]bool
	for _, k := range ks {
		if k.Level == txn.LevelTable {
			if tables == nil {
				tables = make(map[txn.Key]bool)
			}
			tables[k] = true
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Less(ks[j]) })
	out := ks[:0]
	for i, k := range ks {
		if i > 0 && k == ks[i-1] {
			continue
		}
		if k.Level != txn.LevelTable && tables[k.TableKey()] {
			continue
		}
		out = append(out, k)
	}
	return out
}

// values resolves vs for a column of type typ to canonical texts. A range
// (a lower bound followed by its upper bound: BETWEEN, or >=/> with <=/<)
// becomes each integer between them, for an integer column only, and
// only if there are at most limit of them (limit <= 0: defaultKeyLimit):
// every row the range can read, those inserted later included, has one of
// these values. A bound alone makes it fail.
func values(vs []val, typ string, params []Param, limit int) ([]string, bool) {
	out := make([]string, 0, len(vs))
	for i := 0; i < len(vs); i++ {
		v := vs[i]
		if v.rng.lower() {
			if i+1 >= len(vs) || vs[i+1].rng == 0 || vs[i+1].rng.lower() {
				return nil, false // a bound alone
			}
			lo, ok1 := scalar(v, typ, params)
			hi, ok2 := scalar(vs[i+1], typ, params)
			if !ok1 || !ok2 {
				return nil, false
			}
			var ok bool
			out, ok = appendRange(out, typ, lo, v.rng == rangeLoExcl, hi, vs[i+1].rng == rangeHiExcl, limit)
			if !ok {
				return nil, false
			}
			i++
			continue
		}
		if v.rng != 0 {
			return nil, false // an upper bound without its lower bound
		}
		switch v.kind {
		case vConst, vParam:
			c, ok := scalar(v, typ, params)
			if !ok {
				return nil, false
			}
			out = append(out, c)
		case vParamArray:
			if v.param < 1 || v.param > len(params) {
				return nil, false
			}
			p := params[v.param-1]
			if p.Value == nil || !declaredAs(p.Declared, typ, true) {
				return nil, false
			}
			if p.Binary {
				elems, ok := binaryArray(p.Value)
				if !ok {
					return nil, false
				}
				for _, e := range elems {
					c, ok := canonicalBinary(typ, e)
					if !ok {
						return nil, false
					}
					out = append(out, c)
				}
			} else {
				elems, ok := TextArray(string(p.Value))
				if !ok {
					return nil, false
				}
				for _, e := range elems {
					c, ok := canonical(typ, e)
					if !ok {
						return nil, false
					}
					out = append(out, c)
				}
			}
		default:
			return nil, false
		}
	}
	return out, true
}

// scalar resolves one literal or $n for a column of type typ to its
// canonical text.
func scalar(v val, typ string, params []Param) (string, bool) {
	switch v.kind {
	case vConst:
		return canonical(typ, v.text)
	case vParam:
		if v.param < 1 || v.param > len(params) {
			return "", false
		}
		p := params[v.param-1]
		if p.Value == nil || !declaredAs(p.Declared, typ, false) {
			return "", false
		}
		if p.Binary {
			return canonicalBinary(typ, p.Value)
		}
		return canonical(typ, string(p.Value))
	}
	return "", false
}

// appendRange appends every integer from lo to hi (canonical texts of an
// integer column of type typ; without lo itself if loExcl, without hi if
// hiExcl) to out, or reports false if typ is not an integer type or there
// would be more than limit of them. An empty range appends nothing: it
// reads no row.
func appendRange(out []string, typ, lo string, loExcl bool, hi string, hiExcl bool, limit int) ([]string, bool) {
	if typ != "int2" && typ != "int4" && typ != "int8" {
		return nil, false
	}
	l, err1 := strconv.ParseInt(lo, 10, 64)
	h, err2 := strconv.ParseInt(hi, 10, 64)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	if loExcl {
		if l == math.MaxInt64 {
			return out, true
		}
		l++
	}
	if hiExcl {
		if h == math.MinInt64 {
			return out, true
		}
		h--
	}
	if h < l {
		return out, true
	}
	if limit <= 0 {
		limit = defaultKeyLimit
	}
	// (uint64: h-l overflows int64 when l is negative enough.)
	if uint64(h)-uint64(l) >= uint64(limit) || len(out)+int(uint64(h)-uint64(l))+1 > limit {
		return nil, false
	}
	for x := l; ; x++ {
		out = append(out, strconv.FormatInt(x, 10))
		if x == h {
			return out, true
		}
	}
}

// keys appends the finest keys a's predicates prove, at most limit of them
// (limit <= 0: no limit), else the table key.
func (a *access) keys(params []Param, limit int, out []txn.Key) []txn.Key {
	t := a.table
	if !a.tableOnly && len(t.PK) > 0 && len(a.pk) == len(t.PK) {
		if k, ok := a.rowKeys(params, limit, out); ok {
			return k
		}
	}
	if !a.tableOnly && a.granule != nil {
		col, _ := t.Column(t.Granule)
		if vs, ok := values(a.granule, col.Type, params, limit); ok && (limit <= 0 || len(vs) <= limit) {
			for _, v := range vs {
				out = append(out, txn.GranuleKey(t.Name.Schema, t.Name.Name, t.Granule, v))
			}
			return out
		}
	}
	return append(out, txn.TableKey(t.Name.Schema, t.Name.Name))
}

func (a *access) rowKeys(params []Param, limit int, out []txn.Key) ([]txn.Key, bool) {
	t := a.table
	cols := make([][]string, len(t.PK))
	n := 1
	for i, name := range t.PK {
		if a.pk[i] == nil {
			return out, false
		}
		col, _ := t.Column(name)
		vs, ok := values(a.pk[i], col.Type, params, limit)
		if !ok {
			return out, false
		}
		cols[i] = vs
		n *= len(vs)
		if limit > 0 && n > limit {
			return out, false
		}
	}
	if n == 0 {
		// An empty IN list or array: no row is read, but a coarser key is
		// harmless and keeps "reads something" obvious.
		return out, false
	}
	if len(cols) == 1 {
		for _, v := range cols[0] {
			out = append(out, txn.Key{Level: txn.LevelRow, Schema: t.Name.Schema, Table: t.Name.Name, Value: txn.EncodeValues(v)})
		}
		return out, true
	}
	idx := make([]int, len(cols))
	tuple := make([]string, len(cols))
	for {
		for i := range cols {
			tuple[i] = cols[i][idx[i]]
		}
		out = append(out, txn.RowKey(t.Name.Schema, t.Name.Name, tuple...))
		i := len(cols) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(cols[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out, true
		}
	}
}
