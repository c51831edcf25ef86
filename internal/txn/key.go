package txn

import (
	"errors"
	"fmt"
	"strings"
)

// Level is the granularity of a Key.
type Level uint8

// Key levels, coarsest first. A table key covers its granule keys, which
// cover their row keys. Unique keys stand beside row keys: they name a value
// of a unique constraint rather than a row.
const (
	LevelTable Level = iota + 1
	LevelGranule
	LevelRow
	LevelUnique
)

// String returns "table", "granule", "row" or "unique".
func (l Level) String() string {
	switch l {
	case LevelTable:
		return "table"
	case LevelGranule:
		return "granule"
	case LevelRow:
		return "row"
	case LevelUnique:
		return "unique"
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// Key identifies what a transaction touched, independently of the node: a
// schema-qualified table name plus, below table level, canonical text values
// (see EncodeValues). Keys are comparable and are used as map keys directly.
//
//   - table key:   Schema, Table
//   - granule key: Schema, Table, Column (the configured granule column), Value
//   - row key:     Schema, Table, Value (the primary key tuple, in key column order)
//   - unique key:  Schema, Table, Column (the constraint name), Value
type Key struct {
	Level  Level
	Schema string
	Table  string
	// Column is the granule column of a granule key and the constraint name
	// of a unique key; empty otherwise.
	Column string
	// Value is the canonical encoding (EncodeValues) of the granule value,
	// the primary key values or the unique constraint values.
	Value string
}

// TableKey returns the key of a whole table.
func TableKey(schema, table string) Key {
	return Key{Level: LevelTable, Schema: schema, Table: table}
}

// GranuleKey returns the key of the rows of a table whose granule column has
// the given canonical text value.
func GranuleKey(schema, table, column, value string) Key {
	return Key{Level: LevelGranule, Schema: schema, Table: table, Column: column, Value: EncodeValues(value)}
}

// RowKey returns the key of the row whose primary key columns have the given
// canonical text values, in primary key column order.
func RowKey(schema, table string, pk ...string) Key {
	return Key{Level: LevelRow, Schema: schema, Table: table, Value: EncodeValues(pk...)}
}

// UniqueKey returns the key of the values of a unique constraint.
func UniqueKey(schema, table, constraint string, values ...string) Key {
	return Key{Level: LevelUnique, Schema: schema, Table: table, Column: constraint, Value: EncodeValues(values...)}
}

// TableKey returns the table key this key belongs to.
func (k Key) TableKey() Key { return TableKey(k.Schema, k.Table) }

// Values decodes the key's values (nil for a table key).
func (k Key) Values() ([]string, error) {
	if k.Level == LevelTable {
		return nil, nil
	}
	return DecodeValues(k.Value)
}

// String renders the key for logs, errors and golden files:
//
//	public.t   public.t@w=1   public.t(1,"a b")   public.t#t_name_key("x")
func (k Key) String() string {
	var b strings.Builder
	b.WriteString(k.Schema)
	b.WriteByte('.')
	b.WriteString(k.Table)
	switch k.Level {
	case LevelGranule:
		b.WriteByte('@')
		b.WriteString(k.Column)
		b.WriteByte('=')
		b.WriteString(k.Value)
	case LevelRow:
		b.WriteByte('(')
		b.WriteString(k.Value)
		b.WriteByte(')')
	case LevelUnique:
		b.WriteByte('#')
		b.WriteString(k.Column)
		b.WriteByte('(')
		b.WriteString(k.Value)
		b.WriteByte(')')
	}
	return b.String()
}

// Less orders keys by schema, table, level, column and value; used to give
// key sets a deterministic order.
func (k Key) Less(o Key) bool {
	if k.Schema != o.Schema {
		return k.Schema < o.Schema
	}
	if k.Table != o.Table {
		return k.Table < o.Table
	}
	if k.Level != o.Level {
		return k.Level < o.Level
	}
	if k.Column != o.Column {
		return k.Column < o.Column
	}
	return k.Value < o.Value
}

// ErrBadValues is returned by DecodeValues for text EncodeValues cannot
// have produced.
var ErrBadValues = errors.New("txn: malformed key values")

// EncodeValues encodes canonical text values (PostgreSQL's text output of
// each value) as one string: values are separated by commas; a value made
// only of ASCII letters, digits and "-_.+:" is written as is, any other
// (including the empty string) is double-quoted with '"' and '\' escaped by
// a backslash. The encoding is injective, so equal keys mean equal values.
func EncodeValues(vals ...string) string {
	if len(vals) == 1 && plain(vals[0]) {
		return vals[0]
	}
	n := 0
	for _, v := range vals {
		n += len(v) + 3
	}
	b := make([]byte, 0, n)
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendValue(b, v)
	}
	return string(b)
}

// appendValue appends the encoding of one value, as EncodeValues does, to b.
func appendValue(b []byte, v string) []byte {
	if plain(v) {
		return append(b, v...)
	}
	b = append(b, '"')
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

func plain(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == '+', c == ':':
		default:
			return false
		}
	}
	return true
}

// DecodeValues is the inverse of EncodeValues.
func DecodeValues(s string) ([]string, error) {
	var out []string
	i := 0
	for {
		if i < len(s) && s[i] == '"' {
			var b strings.Builder
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					b.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if c == '"' {
					closed = true
					break
				}
				b.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("%w: unterminated quote in %q", ErrBadValues, s)
			}
			out = append(out, b.String())
		} else {
			j := strings.IndexByte(s[i:], ',')
			if j < 0 {
				j = len(s) - i
			}
			v := s[i : i+j]
			if !plain(v) {
				return nil, fmt.Errorf("%w: %q", ErrBadValues, s)
			}
			out = append(out, v)
			i += j
		}
		if i == len(s) {
			return out, nil
		}
		if s[i] != ',' {
			return nil, fmt.Errorf("%w: %q", ErrBadValues, s)
		}
		i++
	}
}
