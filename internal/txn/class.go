package txn

import "strings"

// ClassRef names a conflict class (DESIGN.md "Conflict classes"), or one
// granule partition of a class split by a granule column: {"district", "w",
// "1"} is district[w=1]. A ClassRef with an empty Label covers every
// partition of its class.
type ClassRef struct {
	Name  string
	Label string // the class's granule label ("w"); empty for the whole class
	Value string // canonical text of the granule value; empty for the whole class
}

// Whole reports whether r names the whole class rather than one partition.
func (r ClassRef) Whole() bool { return r.Label == "" }

// Covers reports whether holding r lets a transaction touch o: the same
// class, and either r is the whole class or the same partition.
func (r ClassRef) Covers(o ClassRef) bool {
	if r.Name != o.Name {
		return false
	}
	return r.Whole() || (r.Label == o.Label && r.Value == o.Value)
}

// String renders "district" or "district[w=1]", the declaration syntax.
func (r ClassRef) String() string {
	if r.Whole() {
		return r.Name
	}
	var b strings.Builder
	b.WriteString(r.Name)
	b.WriteByte('[')
	b.WriteString(r.Label)
	b.WriteByte('=')
	b.WriteString(r.Value)
	b.WriteByte(']')
	return b.String()
}

// AllClasses is the class name that stands for every class.
const AllClasses = "*"

// Conflicts reports whether transactions holding r and o may touch the
// same rows: the same class where either is the whole class or both are
// the same partition, or either is every class.
func (r ClassRef) Conflicts(o ClassRef) bool {
	if r.Name == AllClasses || o.Name == AllClasses {
		return true
	}
	return r.Name == o.Name && (r.Whole() || o.Whole() || (r.Label == o.Label && r.Value == o.Value))
}
