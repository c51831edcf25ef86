package analysis

import "slices"

// keyType is what a key column of one type compares as its own value: a
// value of another type (cast to it, a parameter declared of it, a join's
// other column) is a key of the column only if the column's comparison
// with it neither rounds, truncates nor changes equality.
type keyType struct {
	// family groups the column types that give a value the same key
	// (canonicalBinary reads an integer of any width; text and varchar
	// are the same bytes): a join's values propagate only within one.
	family string
	// casts are the types a value may be cast to and stay a key.
	casts []string
	// scalar and array are the parameter types (OIDs) a Bind may declare,
	// as scalars and as arrays.
	scalar, array []uint32
}

var (
	intKey  = keyType{"int", []string{"int2", "int4", "int8"}, []uint32{21, 23, 20}, []uint32{1005, 1007, 1016}}
	textKey = keyType{"text", []string{"text", "varchar"}, []uint32{25, 1043}, []uint32{1009, 1015}}
)

// keyTypes are the key column types whose values may be of another type
// or declared: any other column type takes only values of its own type,
// and parameters left to PostgreSQL to type.
var keyTypes = map[string]keyType{
	"int2":    intKey,
	"int4":    intKey,
	"int8":    intKey,
	"oid":     {"oid", []string{"oid", "int2", "int4", "int8"}, []uint32{26, 21, 23, 20}, []uint32{1028, 1005, 1007, 1016}},
	"text":    textKey,
	"varchar": textKey,
	"bool":    {"bool", []string{"bool"}, []uint32{16}, []uint32{1000}},
	"uuid":    {"uuid", []string{"uuid"}, []uint32{2950}, []uint32{2951}},
}

// typeFamily is the family of a key column type (keyType.family).
func typeFamily(typ string) string {
	if k, ok := keyTypes[typ]; ok {
		return k.family
	}
	return typ
}

// castKeeps reports whether casting a value to cast and comparing it with
// a column of type col compares the value itself.
func castKeeps(cast, col string) bool {
	if k, ok := keyTypes[col]; ok {
		return slices.Contains(k.casts, cast)
	}
	return cast == col
}

// declaredAs reports whether a parameter declared of type oid (0: not
// declared) is compared with a key column of type typ as a value of that
// type: undeclared, or declared of a type whose values the column
// compares as its own.
func declaredAs(oid uint32, typ string, array bool) bool {
	if oid == 0 {
		return true
	}
	k := keyTypes[typ]
	if array {
		return slices.Contains(k.array, oid)
	}
	return slices.Contains(k.scalar, oid)
}
