package apply

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/capture"
)

// stmt is one statement of an apply: SQL text with text-format parameters
// of unspecified type (PostgreSQL infers each from the column it is
// compared with or assigned to, so no OID crosses nodes), and the number of
// rows it must affect (-1: any).
type stmt struct {
	sql    string
	params [][]byte
	want   int64
	row    *capture.Row
	// at is the index in the write set's rows of its (first) row; the
	// number of rows for a statement that applies none (large objects,
	// notifications, which come last).
	at int
}

func quoteTable(t *capture.Table) string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

func quoteCol(c string) string { return pgx.Identifier{c}.Sanitize() }

// statements turns a write set into statements, in order. Consecutive
// truncate rows of one TRUNCATE become one statement.
func statements(ws *capture.WriteSet) ([]stmt, error) {
	out := make([]stmt, 0, len(ws.Rows))
	inserts := map[*capture.Table]string{}
	for i := 0; i < len(ws.Rows); i++ {
		r, first := &ws.Rows[i], i
		var s stmt
		var err error
		switch r.Op {
		case capture.OpInsert:
			s, err = insertStmt(r, inserts)
		case capture.OpUpdate:
			s, err = updateStmt(r)
		case capture.OpDelete:
			s, err = deleteStmt(r)
		case capture.OpTruncate:
			j := i
			var names []string
			for j < len(ws.Rows) && ws.Rows[j].Op == capture.OpTruncate && ws.Rows[j].TruncateGroup == r.TruncateGroup {
				names = append(names, quoteTable(ws.Rows[j].Table))
				j++
			}
			sql := "TRUNCATE ONLY " + strings.Join(names, ", ")
			if r.RestartIdentity {
				sql += " RESTART IDENTITY"
			}
			if r.Cascade {
				sql += " CASCADE"
			}
			s = stmt{sql: sql, want: -1, row: r}
			i = j - 1
		default:
			err = fmt.Errorf("apply: gid %s row %d: unknown op %v", ws.GID, i, r.Op)
		}
		if err != nil {
			return nil, err
		}
		if s.sql != "" {
			s.at = first
			out = append(out, s)
		}
	}
	rest := len(out)
	// Its large objects, set to the state it left them in (their rows are
	// system catalogs', which logical decoding does not carry).
	for i := range ws.LargeObjects {
		out = append(out, largeObjectStmts(&ws.LargeObjects[i])...)
	}
	// The transaction's notifications, sent when the apply commits, as
	// they were when it committed on its origin.
	for _, n := range ws.Notify {
		out = append(out, stmt{sql: "SELECT pg_notify($1, $2)", params: [][]byte{[]byte(n.Channel), []byte(n.Payload)}, want: -1})
	}
	for i := rest; i < len(out); i++ {
		out[i].at = len(ws.Rows)
	}
	return out, nil
}

// largeObjectStmts set one large object to the state lo says
// (_ordo.lo_set and _ordo.lo_drop, bootstrap.go), then write the pieces
// of its content.
func largeObjectStmts(lo *capture.LargeObject) []stmt {
	oid := []byte(strconv.FormatUint(uint64(lo.OID), 10))
	if lo.Unlinked {
		return []stmt{{sql: "SELECT _ordo.lo_drop($1)", params: [][]byte{oid}, want: -1}}
	}
	var acl, comment []byte // nil: NULL
	if lo.ACL != "" {
		acl = []byte(lo.ACL)
	}
	hasComment := []byte("f")
	if lo.HasComment {
		hasComment, comment = []byte("t"), []byte(lo.Comment)
	}
	content := []byte("f")
	if lo.Content {
		content = []byte("t")
	}
	out := []stmt{{sql: "SELECT _ordo.lo_set($1, $2, $3, $4, $5, $6)",
		params: [][]byte{oid, []byte(lo.Owner), acl, hasComment, comment, content}, want: -1}}
	end := int64(0)
	for _, p := range lo.Pieces {
		data := make([]byte, 2+hex.EncodedLen(len(p.Data)))
		copy(data, `\x`)
		hex.Encode(data[2:], p.Data)
		out = append(out, stmt{sql: "SELECT pg_catalog.lo_put($1, $2, $3)",
			params: [][]byte{oid, []byte(strconv.FormatInt(p.Offset, 10)), data}, want: -1})
		end = p.Offset + int64(len(p.Data))
	}
	if lo.Content && lo.Size > end {
		// Its last stored page holds no data (a truncation ended there).
		out = append(out, stmt{sql: "SELECT _ordo.lo_size($1, $2)", params: [][]byte{oid, []byte(strconv.FormatInt(lo.Size, 10))}, want: -1})
	}
	return out
}

func param(v capture.Value) []byte {
	if v.Kind == capture.Null {
		return nil
	}
	return []byte(v.Text)
}

// insertStmt returns the INSERT of r. cache holds the statement text per
// table (an insert names every column, so the text depends on the table
// alone; a bulk load has a million rows of one table).
func insertStmt(r *capture.Row, cache map[*capture.Table]string) (stmt, error) {
	t := r.Table
	if len(r.Values) != len(t.Columns) {
		return stmt{}, fmt.Errorf("apply: insert into %s: %d values for %d columns", t, len(r.Values), len(t.Columns))
	}
	params := make([][]byte, 0, len(t.Columns))
	for i, c := range t.Columns {
		if r.Values[i].Kind == capture.Unchanged {
			return stmt{}, fmt.Errorf("apply: insert into %s: column %s has no value", t, c.Name)
		}
		params = append(params, param(r.Values[i]))
	}
	sql, ok := cache[t]
	if !ok {
		var b strings.Builder
		b.WriteString("INSERT INTO ")
		b.WriteString(quoteTable(t))
		b.WriteString(" (")
		for i, c := range t.Columns {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteCol(c.Name))
		}
		// The origin's value of a GENERATED ALWAYS identity column is
		// what must be stored (the plain INSERT would be refused);
		// PostgreSQL accepts the clause on any table.
		b.WriteString(") OVERRIDING SYSTEM VALUE VALUES (")
		for i := range params {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i + 1))
		}
		b.WriteString(")")
		sql = b.String()
		cache[t] = sql
	}
	return stmt{sql: sql, params: params, want: 1, row: r}, nil
}

// exactEquality are the built-in types (their OIDs are the same on every
// server) whose = holds exactly when the text forms are equal, so a row
// of a table without a primary key may be found with = (and an index on
// the column). For the others (floats, where -0 = 0; numeric, where 1.0
// = 1.00; interval, json, geometric types, arrays, user types…) the
// column's text form is compared instead.
var exactEquality = map[uint32]bool{
	16: true, 17: true, 18: true, 19: true, 20: true, 21: true, 23: true, 25: true, 26: true, // bool bytea char name int8 int2 int4 text oid
	1042: true, 1043: true, 1082: true, 1114: true, 1184: true, 2950: true, // bpchar varchar date timestamp timestamptz uuid
}

// where appends " WHERE k1 = $n AND …" for the row's key values or, for
// a table without a primary key, a condition that picks one row equal to
// the old row (identical rows cannot be told apart, and changing any one
// of them leaves the same table).
func where(b *strings.Builder, r *capture.Row, params [][]byte) ([][]byte, error) {
	t := r.Table
	if len(t.KeyColumns) == 0 && r.OldRow != nil {
		if len(r.OldRow) != len(t.Columns) {
			return nil, fmt.Errorf("apply: %s: old row of %d values for %d columns", t, len(r.OldRow), len(t.Columns))
		}
		b.WriteString(" WHERE ctid = (SELECT ctid FROM ")
		b.WriteString(quoteTable(t))
		b.WriteString(" WHERE ")
		for i, c := range t.Columns {
			if i > 0 {
				b.WriteString(" AND ")
			}
			v := r.OldRow[i]
			if v.Kind != capture.Text {
				b.WriteString(quoteCol(c.Name))
				b.WriteString(" IS NULL")
				continue
			}
			params = append(params, []byte(v.Text))
			if exactEquality[c.TypeOID] {
				b.WriteString(quoteCol(c.Name))
				b.WriteString(" = $")
			} else {
				// format('%s') is the type's output function, as
				// pgoutput's text form is.
				b.WriteString("format('%s', ")
				b.WriteString(quoteCol(c.Name))
				b.WriteString(") = $")
			}
			b.WriteString(strconv.Itoa(len(params)))
			if !exactEquality[c.TypeOID] {
				b.WriteString("::text")
			}
		}
		b.WriteString(" LIMIT 1 FOR UPDATE)")
		return params, nil
	}
	kv := r.KeyValues()
	if len(kv) == 0 || len(kv) != len(t.KeyColumns) {
		return nil, fmt.Errorf("apply: %s has no primary key values", t)
	}
	b.WriteString(" WHERE ")
	for i, k := range t.KeyColumns {
		if i > 0 {
			b.WriteString(" AND ")
		}
		params = append(params, []byte(kv[i]))
		b.WriteString(quoteCol(t.Columns[k].Name))
		b.WriteString(" = $")
		b.WriteString(strconv.Itoa(len(params)))
	}
	return params, nil
}

func updateStmt(r *capture.Row) (stmt, error) {
	t := r.Table
	if len(r.Values) != len(t.Columns) {
		return stmt{}, fmt.Errorf("apply: update of %s: %d values for %d columns", t, len(r.Values), len(t.Columns))
	}
	keyChanged := r.OldValues != nil
	var b strings.Builder
	b.WriteString("UPDATE ")
	b.WriteString(quoteTable(t))
	b.WriteString(" SET ")
	var params [][]byte
	for i, c := range t.Columns {
		v := r.Values[i]
		if v.Kind == capture.Unchanged || (c.Key && !keyChanged) {
			continue
		}
		if len(params) > 0 {
			b.WriteString(", ")
		}
		params = append(params, param(v))
		b.WriteString(quoteCol(c.Name))
		b.WriteString(" = $")
		b.WriteString(strconv.Itoa(len(params)))
	}
	if len(params) == 0 {
		// Nothing but unchanged values: the row's content is as it was.
		return stmt{}, nil
	}
	params, err := where(&b, r, params)
	if err != nil {
		return stmt{}, err
	}
	return stmt{sql: b.String(), params: params, want: 1, row: r}, nil
}

func deleteStmt(r *capture.Row) (stmt, error) {
	var b strings.Builder
	b.WriteString("DELETE FROM ")
	b.WriteString(quoteTable(r.Table))
	params, err := where(&b, r, nil)
	if err != nil {
		return stmt{}, err
	}
	return stmt{sql: b.String(), params: params, want: 1, row: r}, nil
}

// queue adds s to a batch.
func queue(b *pgconn.Batch, s *stmt) { b.ExecParams(s.sql, s.params, nil, nil, nil) }
