package txn

import "strings"

// Mode is a lock mode of a key, or a set of modes (the modes are bits and
// may be OR-ed: a transaction that read and wrote a row holds S|X on it).
type Mode uint8

// The modes of DESIGN.md "Key modes and the conflict rule".
const (
	// S is a read of the key (serializable protocols only). S keys are
	// checked by certification but never recorded in the index.
	S Mode = 1 << iota
	// IX marks a table or granule key under which some row was written.
	IX
	// X is a write of the key itself: a row, a unique value, or a whole
	// table (TRUNCATE, unattributable writes).
	X
	// R is a reference to a parent row by a foreign key of a written row.
	R
)

// Recorded is the set of modes the certification index records per key.
const Recorded = IX | X | R

// Has reports whether m contains every mode of o.
func (m Mode) Has(o Mode) bool { return m&o == o && o != 0 }

// String returns the modes as "S", "IX|X" and so on, "-" for none.
func (m Mode) String() string {
	if m == 0 {
		return "-"
	}
	var parts []string
	for _, p := range []struct {
		m Mode
		s string
	}{{S, "S"}, {IX, "IX"}, {X, "X"}, {R, "R"}} {
		if m&p.m != 0 {
			parts = append(parts, p.s)
		}
	}
	return strings.Join(parts, "|")
}

// Conflicts reports whether a key held by T in mode t conflicts with the
// same key recorded by an earlier, concurrent U in mode u, following the
// table in DESIGN.md (rows are T's mode, columns U's recorded mode):
//
//	T \ U   X   IX   R
//	X       +   +    +
//	IX      +   -    -
//	R       +   -    -
//	S       +   +    -
//
// checkReads must be false under dbsm-si, where S keys are not checked.
// Either argument may hold several modes; any conflicting pair counts.
func Conflicts(t, u Mode, checkReads bool) bool {
	if u&X != 0 && (t&(X|IX|R) != 0 || (checkReads && t&S != 0)) {
		return true
	}
	if t&X != 0 && u&(IX|R) != 0 {
		return true
	}
	if checkReads && t&S != 0 && u&IX != 0 {
		return true
	}
	return false
}
