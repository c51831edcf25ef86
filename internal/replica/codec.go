package replica

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// encodeTxn builds the total-order payload of a transaction to terminate.
func encodeTxn(t *Txn, protocol string) ([]byte, error) {
	e := &ordov1.TxnEntry{
		Gid:           string(t.GID),
		Origin:        t.Origin,
		SnapshotSeqno: t.SnapshotSeqno,
		ReadAll:       t.ReadAll,
		Protocol:      protocol,
		Ddl:           t.DDL,
		SearchPath:    t.SearchPath,
	}
	for _, km := range t.Keys {
		e.Keys = append(e.Keys, &ordov1.Key{
			Level: uint32(km.Key.Level), Schema: km.Key.Schema, Table: km.Key.Table,
			Column: km.Key.Column, Value: km.Key.Value, Mode: uint32(km.Mode),
		})
	}
	if ws := t.WriteSet; ws != nil {
		tables := map[*capture.Table]uint32{}
		for i := range ws.Rows {
			r := &ws.Rows[i]
			ti, ok := tables[r.Table]
			if !ok {
				ti = uint32(len(e.Tables))
				tables[r.Table] = ti
				td := &ordov1.Table{Schema: r.Table.Schema, Name: r.Table.Name}
				for _, c := range r.Table.Columns {
					td.Columns = append(td.Columns, c.Name)
					td.TypeOids = append(td.TypeOids, c.TypeOID)
				}
				for _, k := range r.Table.KeyColumns {
					td.KeyColumns = append(td.KeyColumns, uint32(k))
				}
				e.Tables = append(e.Tables, td)
			}
			rc := &ordov1.RowChange{
				Op: uint32(r.Op), Table: ti, OldKey: r.OldValues,
				TruncateGroup: uint32(r.TruncateGroup), Cascade: r.Cascade, RestartIdentity: r.RestartIdentity,
			}
			for _, v := range r.Values {
				rc.Values = append(rc.Values, &ordov1.Value{Kind: uint32(v.Kind), Text: v.Text})
			}
			e.Rows = append(e.Rows, rc)
		}
	}
	return proto.Marshal(&ordov1.Entry{Kind: &ordov1.Entry_Txn{Txn: e}})
}

func encodeEntry(e *ordov1.Entry) ([]byte, error) { return proto.Marshal(e) }

func encodeAbort(gid txn.GID) ([]byte, error) {
	return proto.Marshal(&ordov1.Entry{Kind: &ordov1.Entry_Abort{Abort: &ordov1.AbortEntry{Gid: string(gid)}}})
}

// decodeKeys returns the keys of a delivered transaction.
func decodeKeys(e *ordov1.TxnEntry) []txn.KeyMode {
	out := make([]txn.KeyMode, len(e.Keys))
	for i, k := range e.Keys {
		out[i] = txn.KeyMode{
			Key:  txn.Key{Level: txn.Level(k.Level), Schema: k.Schema, Table: k.Table, Column: k.Column, Value: k.Value},
			Mode: txn.Mode(k.Mode),
		}
	}
	return out
}

// decodeWriteSet rebuilds the write set of a delivered transaction.
func decodeWriteSet(e *ordov1.TxnEntry) (*capture.WriteSet, error) {
	tables := make([]*capture.Table, len(e.Tables))
	for i, td := range e.Tables {
		if len(td.TypeOids) != len(td.Columns) {
			return nil, fmt.Errorf("replica: entry %s: table %s.%s: %d columns, %d types", e.Gid, td.Schema, td.Name, len(td.Columns), len(td.TypeOids))
		}
		t := &capture.Table{Schema: td.Schema, Name: td.Name}
		for j, c := range td.Columns {
			t.Columns = append(t.Columns, capture.Column{Name: c, TypeOID: td.TypeOids[j]})
		}
		for _, k := range td.KeyColumns {
			if int(k) >= len(t.Columns) {
				return nil, fmt.Errorf("replica: entry %s: table %s: key column %d out of range", e.Gid, t, k)
			}
			t.KeyColumns = append(t.KeyColumns, int(k))
			t.Columns[k].Key = true
		}
		tables[i] = t
	}
	ws := &capture.WriteSet{GID: txn.GID(e.Gid), Rows: make([]capture.Row, len(e.Rows))}
	for i, rc := range e.Rows {
		if int(rc.Table) >= len(tables) {
			return nil, fmt.Errorf("replica: entry %s: row %d: table %d out of range", e.Gid, i, rc.Table)
		}
		t := tables[rc.Table]
		r := capture.Row{
			Op: capture.Op(rc.Op), Table: t, OldValues: rc.OldKey,
			TruncateGroup: int(rc.TruncateGroup), Cascade: rc.Cascade, RestartIdentity: rc.RestartIdentity,
		}
		if len(rc.Values) > 0 {
			if len(rc.Values) != len(t.Columns) {
				return nil, fmt.Errorf("replica: entry %s: row %d: %d values for %d columns", e.Gid, i, len(rc.Values), len(t.Columns))
			}
			r.Values = make([]capture.Value, len(rc.Values))
			for j, v := range rc.Values {
				r.Values[j] = capture.Value{Kind: capture.ValueKind(v.Kind), Text: v.Text}
			}
		}
		switch r.Op {
		case capture.OpTruncate:
			r.Key = t.TableKey()
		case capture.OpInsert, capture.OpUpdate, capture.OpDelete:
			if len(t.KeyColumns) == 0 {
				if r.Op != capture.OpInsert {
					return nil, fmt.Errorf("replica: entry %s: row %d: %s of %s, which has no primary key", e.Gid, i, r.Op, t)
				}
				if r.Values == nil {
					return nil, fmt.Errorf("replica: entry %s: row %d: insert without values", e.Gid, i)
				}
				break // no row key
			}
			if r.Op == capture.OpDelete {
				if len(r.OldValues) != len(t.KeyColumns) {
					return nil, fmt.Errorf("replica: entry %s: row %d: delete without its key", e.Gid, i)
				}
				r.Key = txn.RowKey(t.Schema, t.Name, r.OldValues...)
				break
			}
			if r.Values == nil {
				return nil, fmt.Errorf("replica: entry %s: row %d: %s without values", e.Gid, i, r.Op)
			}
			key := make([]string, len(t.KeyColumns))
			for j, c := range t.KeyColumns {
				if r.Values[c].Kind != capture.Text {
					return nil, fmt.Errorf("replica: entry %s: row %d: key column %s has no value", e.Gid, i, t.Columns[c].Name)
				}
				key[j] = r.Values[c].Text
			}
			r.Key = txn.RowKey(t.Schema, t.Name, key...)
			if r.OldValues != nil {
				if len(r.OldValues) != len(t.KeyColumns) {
					return nil, fmt.Errorf("replica: entry %s: row %d: old key of the wrong length", e.Gid, i)
				}
				r.OldKey = txn.RowKey(t.Schema, t.Name, r.OldValues...)
			}
		default:
			return nil, fmt.Errorf("replica: entry %s: row %d: unknown op %d", e.Gid, i, rc.Op)
		}
		ws.Rows[i] = r
	}
	return ws, nil
}
