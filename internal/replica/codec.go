package replica

import (
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// encodeTxn encodes a transaction to terminate and returns the payload of
// its TxnEntry. When that entry would be larger than maxEntry bytes (<= 0:
// no limit), the rows are cut into FragmentEntry payloads of about
// maxEntry bytes, handed to fragment in order as they are encoded (so only
// one is in memory at a time) before the TxnEntry is built with the keys,
// the DDL and the last rows. An error from fragment stops the encoding and
// is returned.
func encodeTxn(t *Txn, protocol string, maxEntry int, fragment func(payload []byte) error) ([]byte, error) {
	e := &ordov1.TxnEntry{
		Gid:           string(t.GID),
		Origin:        t.Origin,
		SnapshotSeqno: t.SnapshotSeqno,
		ReadAll:       t.ReadAll,
		Serializable:  t.Serializable,
		Protocol:      protocol,
		Ddl:           t.DDL,
		DdlSettings:   encodeSettings(t.DDLSettings),
		DdlRowsBefore: encodeRowsBefore(t.DDLRowsBefore),
		Label:         t.Label,
		SearchPath:    t.SearchPath,
		BeginSeqno:    t.BeginSeqno,
		GranuleSeqno:  t.GranuleSeqno,
	}
	loBytes := 0
	if t.WriteSet != nil {
		for _, n := range t.WriteSet.Notify {
			e.Notify = append(e.Notify, &ordov1.Notification{Channel: n.Channel, Payload: n.Payload})
		}
		for _, lo := range t.WriteSet.LargeObjects {
			e.LargeObjects = append(e.LargeObjects, &ordov1.LargeObject{
				Oid: lo.OID, Unlinked: lo.Unlinked, Owner: lo.Owner, Acl: lo.ACL,
				HasComment: lo.HasComment, Comment: lo.Comment, Content: lo.Content, Size: uint64(lo.Size),
			})
			for _, p := range lo.Pieces {
				e.LargeObjectData = append(e.LargeObjectData, &ordov1.LargeObjectData{Oid: lo.OID, Offset: uint64(p.Offset), Data: p.Data})
				loBytes += len(p.Data)
			}
		}
	}
	e.KeyRuns = encodeKeys(t.Keys)
	whole := &ordov1.Entry{Kind: &ordov1.Entry_Txn{Txn: e}}
	var rows []capture.Row
	if t.WriteSet != nil {
		rows = t.WriteSet.Rows
	}
	if maxEntry <= 0 {
		p := packer{budget: math.MaxInt}
		for i := range rows {
			p.add(&rows[i])
		}
		e.Tables, e.Rows = p.cur.tables, p.cur.rows
		return proto.Marshal(whole)
	}
	// Leave room in each fragment for its envelope (gid, index, tags); the
	// TxnEntry's own fields are counted when its rows are chosen.
	p := packer{budget: max(maxEntry-len(t.GID)-64, 1)}
	n := uint32(0)
	emit := func(pc piece) error {
		b, err := proto.Marshal(&ordov1.Entry{Kind: &ordov1.Entry_Fragment{Fragment: &ordov1.FragmentEntry{
			Gid: string(t.GID), Index: n, Tables: pc.tables, Rows: pc.rows,
		}}})
		if err != nil {
			return err
		}
		n++
		return fragment(b)
	}
	for i := range rows {
		if full, ok := p.add(&rows[i]); ok {
			if err := emit(full); err != nil {
				return nil, err
			}
		}
	}
	last := p.cur
	if proto.Size(whole)+last.size > maxEntry && loBytes > 0 {
		// The large objects' content leaves no room: it travels in
		// fragments of its own, in chunks, after the rows; the entry
		// keeps the objects' state without it.
		if len(last.rows) > 0 {
			if err := emit(last); err != nil {
				return nil, err
			}
			last = piece{}
		}
		chunk := max(p.budget-64, 1)
		for _, d := range e.LargeObjectData {
			for off := 0; off < len(d.Data); off += chunk {
				b, err := proto.Marshal(&ordov1.Entry{Kind: &ordov1.Entry_Fragment{Fragment: &ordov1.FragmentEntry{
					Gid: string(t.GID), Index: n, LargeObjectData: []*ordov1.LargeObjectData{{
						Oid: d.Oid, Offset: d.Offset + uint64(off), Data: d.Data[off:min(off+chunk, len(d.Data))],
					}},
				}}})
				if err != nil {
					return nil, err
				}
				n++
				if err := fragment(b); err != nil {
					return nil, err
				}
			}
		}
		e.LargeObjectData = nil
	}
	if proto.Size(whole)+last.size > maxEntry && len(last.rows) > 0 {
		// The keys and DDL leave no room for the last rows.
		if err := emit(last); err != nil {
			return nil, err
		}
		last = piece{}
	}
	e.Tables, e.Rows, e.Fragments = last.tables, last.rows, n
	return proto.Marshal(whole)
}

// piece is a run of consecutive rows with the tables they write, indexed
// from 0 within the piece; size is its encoded size within an entry.
type piece struct {
	tables []*ordov1.Table
	rows   []*ordov1.RowChange
	size   int
}

// packer cuts rows into pieces of at most budget encoded bytes; a single
// row larger than budget is a piece of its own.
type packer struct {
	budget int
	cur    piece
	local  map[*capture.Table]uint32
}

// add encodes r into the current piece, first closing the current piece
// and returning it (ok) if r does not fit in it.
func (p *packer) add(r *capture.Row) (full piece, ok bool) {
	field := func(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }
	rc := &ordov1.RowChange{
		Op: uint32(r.Op), OldKey: r.OldValues,
		TruncateGroup: uint32(r.TruncateGroup), Cascade: r.Cascade, RestartIdentity: r.RestartIdentity,
	}
	for _, v := range r.Values {
		rc.Values = append(rc.Values, &ordov1.Value{Kind: uint32(v.Kind), Text: v.Text})
	}
	for _, v := range r.OldRow {
		rc.OldRow = append(rc.OldRow, &ordov1.Value{Kind: uint32(v.Kind), Text: v.Text})
	}
	var td *ordov1.Table
	cost := func() int {
		ti, known := p.local[r.Table]
		if !known {
			ti = uint32(len(p.cur.tables))
		}
		rc.Table = ti
		c := field(proto.Size(rc))
		if !known {
			td = tableDesc(r.Table)
			c += field(proto.Size(td))
		} else {
			td = nil
		}
		return c
	}
	c := cost()
	if len(p.cur.rows) > 0 && p.cur.size+c > p.budget {
		full, ok = p.cur, true
		p.cur, p.local = piece{}, nil
		c = cost()
	}
	if td != nil {
		if p.local == nil {
			p.local = map[*capture.Table]uint32{}
		}
		p.local[r.Table] = uint32(len(p.cur.tables))
		p.cur.tables = append(p.cur.tables, td)
	}
	p.cur.rows = append(p.cur.rows, rc)
	p.cur.size += c
	return full, ok
}

// tableDesc describes a written table for the entry.
func tableDesc(t *capture.Table) *ordov1.Table {
	td := &ordov1.Table{Schema: t.Schema, Name: t.Name}
	for _, c := range t.Columns {
		td.Columns = append(td.Columns, c.Name)
		td.TypeOids = append(td.TypeOids, c.TypeOID)
	}
	for _, k := range t.KeyColumns {
		td.KeyColumns = append(td.KeyColumns, uint32(k))
	}
	return td
}

func encodeEntry(e *ordov1.Entry) ([]byte, error) { return proto.Marshal(e) }

func encodeAbort(gid txn.GID, label string) ([]byte, error) {
	return proto.Marshal(&ordov1.Entry{Kind: &ordov1.Entry_Abort{Abort: &ordov1.AbortEntry{Gid: string(gid), Label: label}}})
}

// encodeKeys writes keys in runs of one column (ordov1.KeyRun): each
// run of consecutive keys that differ only in their values. Keys come
// sorted (by table and column first), so a range read's keys make one.
func encodeKeys(keys []txn.KeyMode) []*ordov1.KeyRun {
	var runs []*ordov1.KeyRun
	var last *ordov1.KeyRun
	for _, km := range keys {
		k := km.Key
		if last == nil || last.Level != uint32(k.Level) || last.Mode != uint32(km.Mode) ||
			last.Column != k.Column || last.Table != k.Table || last.Schema != k.Schema {
			last = &ordov1.KeyRun{Level: uint32(k.Level), Schema: k.Schema, Table: k.Table, Column: k.Column, Mode: uint32(km.Mode)}
			runs = append(runs, last)
		}
		last.Values = append(last.Values, k.Value)
	}
	return runs
}

// decodeKeys returns the keys of a delivered transaction: those of its
// keys (entries of an earlier version), then those of its runs.
func decodeKeys(e *ordov1.TxnEntry) []txn.KeyMode {
	n := len(e.Keys)
	for _, r := range e.KeyRuns {
		n += len(r.Values)
	}
	out := make([]txn.KeyMode, 0, n)
	for _, k := range e.Keys {
		out = append(out, txn.KeyMode{
			Key:  txn.Key{Level: txn.Level(k.Level), Schema: k.Schema, Table: k.Table, Column: k.Column, Value: k.Value},
			Mode: txn.Mode(k.Mode),
		})
	}
	for _, r := range e.KeyRuns {
		for _, v := range r.Values {
			out = append(out, txn.KeyMode{
				Key:  txn.Key{Level: txn.Level(r.Level), Schema: r.Schema, Table: r.Table, Column: r.Column, Value: v},
				Mode: txn.Mode(r.Mode),
			})
		}
	}
	return out
}

// decodeWriteSet rebuilds the write set of a delivered transaction: the
// rows of its fragments, in order, then its own.
func decodeWriteSet(e *ordov1.TxnEntry, frags ...*ordov1.FragmentEntry) (*capture.WriteSet, error) {
	rows := 0
	for _, f := range frags {
		rows += len(f.Rows)
	}
	return decodeFragmented(e, len(frags), rows, func(i int) (*ordov1.FragmentEntry, error) { return frags[i], nil })
}

// decodeFragmented rebuilds the write set of e and its n fragments of
// fragRows rows in all, asking frag for each in turn (so each can be
// decoded and dropped before the next).
func decodeFragmented(e *ordov1.TxnEntry, n, fragRows int, frag func(i int) (*ordov1.FragmentEntry, error)) (*capture.WriteSet, error) {
	ws := &capture.WriteSet{GID: txn.GID(e.Gid), Label: e.Label, Rows: make([]capture.Row, 0, fragRows+len(e.Rows))}
	for _, n := range e.Notify {
		ws.Notify = append(ws.Notify, capture.Notification{Channel: n.Channel, Payload: n.Payload})
	}
	seen := map[string]*capture.Table{} // one *capture.Table per table, across pieces
	var pieces map[uint32][]capture.LargeObjectPiece
	addData := func(where string, ds []*ordov1.LargeObjectData) error {
		for _, d := range ds {
			if pieces == nil {
				pieces = map[uint32][]capture.LargeObjectPiece{}
			}
			ps := pieces[d.Oid]
			if n := len(ps); n > 0 {
				if end := ps[n-1].Offset + int64(len(ps[n-1].Data)); int64(d.Offset) < end {
					return fmt.Errorf("replica: entry %s: %s: large object %d: a piece at offset %d before %d", e.Gid, where, d.Oid, d.Offset, end)
				}
			}
			pieces[d.Oid] = capture.AddPage(ps, int64(d.Offset), d.Data)
		}
		return nil
	}
	for i := range n {
		f, err := frag(i)
		if err != nil {
			return nil, err
		}
		if ws.Rows, err = decodeRows(e.Gid, f.Tables, f.Rows, seen, ws.Rows); err != nil {
			return nil, fmt.Errorf("fragment %d: %w", f.Index, err)
		}
		if err := addData(fmt.Sprintf("fragment %d", f.Index), f.LargeObjectData); err != nil {
			return nil, err
		}
	}
	var err error
	if ws.Rows, err = decodeRows(e.Gid, e.Tables, e.Rows, seen, ws.Rows); err != nil {
		return nil, err
	}
	if err := addData("entry", e.LargeObjectData); err != nil {
		return nil, err
	}
	for _, lo := range e.LargeObjects {
		ps := pieces[lo.Oid]
		if len(ps) > 0 && !lo.Content {
			return nil, fmt.Errorf("replica: entry %s: content of large object %d, whose content it did not write", e.Gid, lo.Oid)
		}
		delete(pieces, lo.Oid)
		ws.LargeObjects = append(ws.LargeObjects, capture.LargeObject{
			OID: lo.Oid, Unlinked: lo.Unlinked, Owner: lo.Owner, ACL: lo.Acl,
			HasComment: lo.HasComment, Comment: lo.Comment, Content: lo.Content, Pieces: ps, Size: int64(lo.Size),
		})
	}
	if len(pieces) > 0 {
		return nil, fmt.Errorf("replica: entry %s: content of %d large objects the entry does not name", e.Gid, len(pieces))
	}
	return ws, nil
}

// decodeRows appends the decoded rows of one entry or fragment to out.
func decodeRows(gid string, tds []*ordov1.Table, rows []*ordov1.RowChange, seen map[string]*capture.Table, out []capture.Row) ([]capture.Row, error) {
	tables := make([]*capture.Table, len(tds))
	for i, td := range tds {
		if len(td.TypeOids) != len(td.Columns) {
			return nil, fmt.Errorf("replica: entry %s: table %s.%s: %d columns, %d types", gid, td.Schema, td.Name, len(td.Columns), len(td.TypeOids))
		}
		t := &capture.Table{Schema: td.Schema, Name: td.Name}
		for j, c := range td.Columns {
			t.Columns = append(t.Columns, capture.Column{Name: c, TypeOID: td.TypeOids[j]})
		}
		for _, k := range td.KeyColumns {
			if int(k) >= len(t.Columns) {
				return nil, fmt.Errorf("replica: entry %s: table %s: key column %d out of range", gid, t, k)
			}
			t.KeyColumns = append(t.KeyColumns, int(k))
			t.Columns[k].Key = true
		}
		sig := fmt.Sprintf("%q.%q %q %v %v", t.Schema, t.Name, td.Columns, td.TypeOids, td.KeyColumns)
		if prev, ok := seen[sig]; ok {
			t = prev
		} else {
			seen[sig] = t
		}
		tables[i] = t
	}
	for i, rc := range rows {
		r, err := decodeRow(gid, i, tables, rc)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeRow decodes the i-th row change of an entry.
func decodeRow(gid string, i int, tables []*capture.Table, rc *ordov1.RowChange) (capture.Row, error) {
	bad := func(format string, args ...any) (capture.Row, error) {
		return capture.Row{}, fmt.Errorf("replica: entry %s: row %d: %s", gid, i, fmt.Sprintf(format, args...))
	}
	if int(rc.Table) >= len(tables) {
		return bad("table %d out of range", rc.Table)
	}
	t := tables[rc.Table]
	r := capture.Row{
		Op: capture.Op(rc.Op), Table: t, OldValues: rc.OldKey,
		TruncateGroup: int(rc.TruncateGroup), Cascade: rc.Cascade, RestartIdentity: rc.RestartIdentity,
	}
	if len(rc.Values) > 0 {
		if len(rc.Values) != len(t.Columns) {
			return bad("%d values for %d columns", len(rc.Values), len(t.Columns))
		}
		r.Values = make([]capture.Value, len(rc.Values))
		for j, v := range rc.Values {
			r.Values[j] = capture.Value{Kind: capture.ValueKind(v.Kind), Text: v.Text}
		}
	}
	if len(rc.OldRow) > 0 {
		if len(rc.OldRow) != len(t.Columns) {
			return bad("old row of %d values for %d columns", len(rc.OldRow), len(t.Columns))
		}
		r.OldRow = make([]capture.Value, len(rc.OldRow))
		for j, v := range rc.OldRow {
			r.OldRow[j] = capture.Value{Kind: capture.ValueKind(v.Kind), Text: v.Text}
			if r.OldRow[j].Kind != capture.Null && r.OldRow[j].Kind != capture.Text {
				return bad("old row value %d of kind %d", j, v.Kind)
			}
		}
	}
	switch r.Op {
	case capture.OpTruncate:
		r.Key = t.TableKey()
	case capture.OpInsert, capture.OpUpdate, capture.OpDelete:
		if len(t.KeyColumns) == 0 {
			if r.Op != capture.OpInsert {
				if r.OldRow == nil {
					return bad("%s of %s, which has no primary key, without its old row", r.Op, t)
				}
				if r.Op == capture.OpUpdate && r.Values == nil {
					return bad("update without values")
				}
				r.Key = capture.FullRowKey(t, r.OldRow)
				break
			}
			if r.Values == nil {
				return bad("insert without values")
			}
			break // no row key
		}
		if r.Op == capture.OpDelete {
			if len(r.OldValues) != len(t.KeyColumns) {
				return bad("delete without its key")
			}
			r.Key = txn.RowKey(t.Schema, t.Name, r.OldValues...)
			break
		}
		if r.Values == nil {
			return bad("%s without values", r.Op)
		}
		key := make([]string, len(t.KeyColumns))
		for j, c := range t.KeyColumns {
			if r.Values[c].Kind != capture.Text {
				return bad("key column %s has no value", t.Columns[c].Name)
			}
			key[j] = r.Values[c].Text
		}
		r.Key = txn.RowKey(t.Schema, t.Name, key...)
		if r.OldValues != nil {
			if len(r.OldValues) != len(t.KeyColumns) {
				return bad("old key of the wrong length")
			}
			r.OldKey = txn.RowKey(t.Schema, t.Name, r.OldValues...)
		}
	default:
		return bad("unknown op %d", rc.Op)
	}
	return r, nil
}

// fromNewerVersion reports whether e holds anything this version does
// not know: unknown fields (proto3 keeps them) in any of its messages, an
// entry of no known kind, or key levels, key modes, value kinds or row
// operations beyond this version's. It runs for every delivered entry, so
// it looks at the concrete messages directly rather than through
// reflection's field walk.
func fromNewerVersion(e *ordov1.Entry) bool {
	unknown := func(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }
	if e.Kind == nil || unknown(e) {
		return true
	}
	var tables []*ordov1.Table
	var rows []*ordov1.RowChange
	switch k := e.Kind.(type) {
	case *ordov1.Entry_Txn:
		if unknown(k.Txn) {
			return true
		}
		for _, ds := range k.Txn.DdlSettings {
			if unknown(ds) {
				return true
			}
			for _, st := range ds.Settings {
				if unknown(st) {
					return true
				}
			}
		}
		badKey := func(level, mode uint32) bool {
			return level < uint32(txn.LevelTable) || level > uint32(txn.LevelUnique) ||
				txn.Mode(mode)&^(txn.S|txn.IX|txn.X|txn.R) != 0
		}
		for _, key := range k.Txn.Keys {
			if unknown(key) || badKey(key.Level, key.Mode) {
				return true
			}
		}
		for _, run := range k.Txn.KeyRuns {
			if unknown(run) || badKey(run.Level, run.Mode) {
				return true
			}
		}
		for _, lo := range k.Txn.LargeObjects {
			if unknown(lo) {
				return true
			}
		}
		for _, d := range k.Txn.LargeObjectData {
			if unknown(d) {
				return true
			}
		}
		tables, rows = k.Txn.Tables, k.Txn.Rows
	case *ordov1.Entry_Fragment:
		if unknown(k.Fragment) {
			return true
		}
		for _, d := range k.Fragment.LargeObjectData {
			if unknown(d) {
				return true
			}
		}
		tables, rows = k.Fragment.Tables, k.Fragment.Rows
	case *ordov1.Entry_Abort:
		return unknown(k.Abort)
	case *ordov1.Entry_SchemaCheck:
		return unknown(k.SchemaCheck)
	case *ordov1.Entry_DataCheck:
		return unknown(k.DataCheck)
	case *ordov1.Entry_Vote:
		return unknown(k.Vote)
	case *ordov1.Entry_Outcome:
		return unknown(k.Outcome)
	case *ordov1.Entry_Protocol:
		return unknown(k.Protocol)
	case *ordov1.Entry_Notify:
		if unknown(k.Notify) {
			return true
		}
		for _, n := range k.Notify.Notify {
			if unknown(n) {
				return true
			}
		}
	case *ordov1.Entry_Begin:
		if unknown(k.Begin) {
			return true
		}
		for _, c := range k.Begin.Classes {
			if unknown(c) {
				return true
			}
		}
	case *ordov1.Entry_Classes:
		if unknown(k.Classes) {
			return true
		}
		for _, c := range k.Classes.Classes {
			if unknown(c) {
				return true
			}
			for _, tc := range c.Columns {
				if unknown(tc) {
					return true
				}
			}
		}
		for _, p := range k.Classes.Profiles {
			if unknown(p) {
				return true
			}
		}
	case *ordov1.Entry_Data:
		if unknown(k.Data) {
			return true
		}
		for _, t := range k.Data.Tables {
			if unknown(t) {
				return true
			}
			for _, b := range t.Buckets {
				if unknown(b) {
					return true
				}
			}
		}
	case *ordov1.Entry_Schema:
		if unknown(k.Schema) {
			return true
		}
		for _, o := range k.Schema.Objects {
			if unknown(o) {
				return true
			}
		}
	}
	for _, t := range tables {
		if unknown(t) {
			return true
		}
	}
	for _, rc := range rows {
		if unknown(rc) || rc.Op < uint32(capture.OpInsert) || rc.Op > uint32(capture.OpTruncate) {
			return true
		}
		for _, vs := range [][]*ordov1.Value{rc.Values, rc.OldRow} {
			for _, v := range vs {
				if unknown(v) || v.Kind < uint32(capture.Null) || v.Kind > uint32(capture.Unchanged) {
					return true
				}
			}
		}
	}
	return false
}

// encodeSettings encodes the settings of each DDL statement (nil if none
// has any).
func encodeSettings(per [][]capture.Setting) []*ordov1.DdlSettings {
	some := false
	for _, ss := range per {
		some = some || len(ss) > 0
	}
	if !some {
		return nil
	}
	out := make([]*ordov1.DdlSettings, len(per))
	for i, ss := range per {
		out[i] = &ordov1.DdlSettings{}
		for _, st := range ss {
			out[i].Settings = append(out[i].Settings, &ordov1.Setting{Name: st.Name, Value: st.Value})
		}
	}
	return out
}

// decodeSettings decodes e's DDL settings, one element per DDL statement
// (nil if it has none).
func decodeSettings(e *ordov1.TxnEntry) ([][]capture.Setting, error) {
	if len(e.DdlSettings) == 0 {
		return nil, nil
	}
	if len(e.DdlSettings) != len(e.Ddl) {
		return nil, fmt.Errorf("replica: %s has settings for %d DDL statements, not %d", e.Gid, len(e.DdlSettings), len(e.Ddl))
	}
	out := make([][]capture.Setting, len(e.DdlSettings))
	for i, ds := range e.DdlSettings {
		for _, st := range ds.Settings {
			out[i] = append(out[i], capture.Setting{Name: st.Name, Value: st.Value})
		}
	}
	return out, nil
}

// encodeRowsBefore encodes TxnEntry.ddl_rows_before.
func encodeRowsBefore(at []int) []uint64 {
	if len(at) == 0 {
		return nil
	}
	out := make([]uint64, len(at))
	for i, n := range at {
		out[i] = uint64(n)
	}
	return out
}

// decodeRowsBefore decodes TxnEntry.ddl_rows_before for a write set of
// rows rows: nil (every statement before the rows) unless it has one
// position per statement, each within the rows and none before the one
// before it.
func decodeRowsBefore(e *ordov1.TxnEntry, rows int) ([]int, error) {
	if len(e.DdlRowsBefore) == 0 {
		return nil, nil
	}
	if len(e.DdlRowsBefore) != len(e.Ddl) {
		return nil, fmt.Errorf("replica: %s: %d positions for %d DDL statements", e.Gid, len(e.DdlRowsBefore), len(e.Ddl))
	}
	out := make([]int, len(e.DdlRowsBefore))
	for i, n := range e.DdlRowsBefore {
		if n > uint64(rows) || (i > 0 && int(n) < out[i-1]) {
			return nil, fmt.Errorf("replica: %s: DDL statement %d after row %d of %d", e.Gid, i, n, rows)
		}
		out[i] = int(n)
	}
	return out, nil
}

// notUTF8 names the first text of t that is not valid UTF-8, or says "":
// the order's entries carry text as protobuf strings, which must be (a
// database whose encoding is SQL_ASCII stores any bytes). Only asked once
// an encoding failed, so the common path pays nothing.
func notUTF8(t *Txn) string {
	valid := utf8.ValidString
	for i, d := range t.DDL {
		if !valid(d) {
			return fmt.Sprintf("its schema change %d", i+1)
		}
		if i < len(t.DDLSettings) {
			for _, st := range t.DDLSettings[i] {
				if !valid(st.Name) || !valid(st.Value) {
					return fmt.Sprintf("a setting of its schema change %d", i+1)
				}
			}
		}
	}
	switch {
	case !valid(t.SearchPath):
		return "its search_path"
	case !valid(t.Label):
		return "its label (ordo.txn_label)"
	}
	for _, km := range t.Keys {
		if !valid(km.Key.Schema) || !valid(km.Key.Table) || !valid(km.Key.Column) || !valid(km.Key.Value) {
			return fmt.Sprintf("a key of %q.%q", km.Key.Schema, km.Key.Table)
		}
	}
	ws := t.WriteSet
	if ws == nil {
		return ""
	}
	for _, r := range ws.Rows {
		tbl := r.Table
		if tbl == nil {
			continue
		}
		where := fmt.Sprintf("%q.%q", tbl.Schema, tbl.Name)
		if !valid(tbl.Schema) || !valid(tbl.Name) {
			return "the name of table " + where
		}
		for _, c := range tbl.Columns {
			if !valid(c.Name) {
				return fmt.Sprintf("a column name of table %s", where)
			}
		}
		for _, vals := range [][]capture.Value{r.Values, r.OldRow} {
			for i, v := range vals {
				if v.Kind == capture.Text && !valid(v.Text) {
					col := ""
					if i < len(tbl.Columns) {
						col = tbl.Columns[i].Name
					}
					return fmt.Sprintf("a value of column %q of table %s", col, where)
				}
			}
		}
		for _, v := range r.OldValues {
			if !valid(v) {
				return fmt.Sprintf("a key value of a row of table %s", where)
			}
		}
	}
	for _, n := range ws.Notify {
		if !valid(n.Channel) || !valid(n.Payload) {
			return "a notification it sent"
		}
	}
	for _, lo := range ws.LargeObjects {
		if !valid(lo.Owner) || !valid(lo.ACL) || !valid(lo.Comment) {
			return fmt.Sprintf("the owner, privileges or comment of large object %d", lo.OID)
		}
	}
	return ""
}
