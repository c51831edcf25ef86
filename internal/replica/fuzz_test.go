package replica

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/termination/dbsm"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// splitPayloads splits fuzz input into entry payloads: a uvarint length,
// then that many bytes, repeated.
func splitPayloads(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 && len(out) < 256 {
		n, k := binary.Uvarint(data)
		if k <= 0 {
			break
		}
		data = data[k:]
		n = min(n, uint64(len(data)))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func joinPayloads(ps ...[]byte) []byte {
	var out []byte
	for _, p := range ps {
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out
}

// FuzzEntries feeds a sequence of arbitrary committed entry payloads
// through what the delivery loop does before any I/O (deliverBatch):
// unmarshal, the newer-version check, decode, the dbsm decider, holding
// fragments, and, for each decision to commit, decoding the write set
// whole (with its fragments), its keys and its DDL settings. Whatever
// another node (or a hostile one) ordered, the loop either refuses an
// entry with an error (the node stops before carrying anything of it out)
// or gets a write set apply can turn into statements. Invariants: no
// panic; a transaction committed with fragments is decoded from exactly
// the fragments the decider counted; every decoded row is one apply can
// execute (its values match its table's columns, its key values are
// there).
func FuzzEntries(f *testing.F) {
	acct := &capture.Table{Schema: "public", Name: "acct",
		Columns: []capture.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "bal", TypeOID: 20}}, KeyColumns: []int{0}}
	logt := &capture.Table{Schema: "public", Name: "log", Columns: []capture.Column{{Name: "line", TypeOID: 25}}}
	ws := &capture.WriteSet{GID: "ordo_2_7", Rows: []capture.Row{
		{Op: capture.OpInsert, Table: acct, Key: txn.RowKey("public", "acct", "1"), Values: []capture.Value{{Kind: capture.Text, Text: "1"}, {Kind: capture.Null}}},
		{Op: capture.OpUpdate, Table: acct, Key: txn.RowKey("public", "acct", "3"), OldKey: txn.RowKey("public", "acct", "2"), OldValues: []string{"2"},
			Values: []capture.Value{{Kind: capture.Text, Text: "3"}, {Kind: capture.Unchanged}}},
		{Op: capture.OpDelete, Table: acct, Key: txn.RowKey("public", "acct", "9"), OldValues: []string{"9"}},
		{Op: capture.OpInsert, Table: logt, Values: []capture.Value{{Kind: capture.Text, Text: strings.Repeat("x", 300)}}},
		{Op: capture.OpTruncate, Table: logt, Key: txn.TableKey("public", "log"), TruncateGroup: 1},
	}}
	for _, maxEntry := range []int{0, 200} {
		t := &Txn{GID: ws.GID, Origin: 2, SnapshotSeqno: 1, WriteSet: ws, Keys: ws.Keys().Sorted(),
			DDL: []string{"CREATE TABLE t (a int)"}, SearchPath: "public"}
		var ps [][]byte
		final, err := encodeTxn(t, DBSM, maxEntry, func(b []byte) error { ps = append(ps, b); return nil })
		if err != nil {
			f.Fatal(err)
		}
		f.Add(joinPayloads(append(ps, final)...))
		if len(ps) > 1 { // a fragment missing; fragments out of order
			f.Add(joinPayloads(append(ps[1:], final)...))
			f.Add(joinPayloads(append([][]byte{ps[1], ps[0]}, append(ps[2:], final)...)...))
		}
	}
	abort, _ := encodeAbort("ordo_2_7", "label")
	f.Add(joinPayloads(abort))
	for _, e := range []*ordov1.Entry{
		{Kind: &ordov1.Entry_Txn{Txn: &ordov1.TxnEntry{Gid: "ordo_3_1", Origin: 3, Protocol: DBSM, Fragments: 2}}},
		{Kind: &ordov1.Entry_Txn{Txn: &ordov1.TxnEntry{Gid: "ordo_3_2", Origin: 3, Protocol: DBSM,
			Tables: []*ordov1.Table{{Schema: "s", Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}, KeyColumns: []uint32{4}}},
			Rows:   []*ordov1.RowChange{{Table: 0, Op: uint32(capture.OpDelete)}}}}},
		{Kind: &ordov1.Entry_Txn{Txn: &ordov1.TxnEntry{Gid: "ordo_3_3", Origin: 3, Protocol: DBSM, Ddl: []string{"a", "b"},
			DdlSettings: []*ordov1.DdlSettings{{}}}}},
		{Kind: &ordov1.Entry_Fragment{Fragment: &ordov1.FragmentEntry{Gid: "ordo_3_1", Index: 1}}},
		{Kind: &ordov1.Entry_Vote{Vote: &ordov1.VoteEntry{}}},
		{Kind: &ordov1.Entry_SchemaCheck{SchemaCheck: &ordov1.SchemaCheckEntry{}}},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(joinPayloads(b))
	}
	f.Add([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		dec, err := dbsm.New(DBSM, 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := &Replica{cfg: Config{NodeID: 1, Protocol: DBSM}, m: newMetrics(nil), dec: dec,
			pending: map[uint64]*ordov1.TxnEntry{}, frags: map[txn.GID]*fragments{}}
		for i, p := range splitPayloads(data) {
			seqno := uint64(i + 1)
			var e ordov1.Entry
			if proto.Unmarshal(p, &e) != nil || fromNewerVersion(&e) {
				return // refused: the node stops here, nothing of it carried out
			}
			ent, err := r.decode(seqno, &e)
			if err != nil {
				return
			}
			st, err := r.dec.Step(&ent)
			if err != nil {
				return
			}
			for _, gid := range st.Expired {
				r.dropFragments(gid)
			}
			if st.Hold {
				r.holdFragment(seqno, e.GetFragment(), p)
			}
			for _, d := range st.Decisions {
				if d.Seqno == 0 {
					r.dropFragments(d.GID)
					continue
				}
				te := r.pending[d.Seqno]
				if te == nil {
					t.Fatalf("seqno %d: decided seqno %d, which is not pending", seqno, d.Seqno)
				}
				delete(r.pending, d.Seqno)
				var fs *fragments
				if te.Fragments > 0 {
					fs = r.dropFragments(d.GID)
				}
				if !d.Commit {
					continue
				}
				if te.Fragments > 0 && (fs == nil || len(fs.data) != int(te.Fragments)) {
					t.Fatalf("seqno %d: %s commits with %d fragments, the engine holds %v", seqno, d.GID, te.Fragments, fs)
				}
				decodeKeys(te)
				if _, err := decodeSettings(te); err != nil {
					return
				}
				ws, err := fs.writeSet(te)
				if err != nil {
					return // refused whole, before any of it is applied
				}
				if ws.DDLRowsBefore, err = decodeRowsBefore(te, len(ws.Rows)); err != nil {
					return
				}
				for i, n := range ws.DDLRowsBefore {
					if n < 0 || n > len(ws.Rows) || (i > 0 && n < ws.DDLRowsBefore[i-1]) {
						t.Fatalf("seqno %d: DDL statement %d placed after row %d of %d (%v)", seqno, i, n, len(ws.Rows), ws.DDLRowsBefore)
					}
				}
				if err := executable(ws); err != nil {
					t.Fatalf("seqno %d: %v", seqno, err)
				}
			}
		}
	})
}

// executable checks what apply's statements assume of a decoded row.
func executable(ws *capture.WriteSet) error {
	for i := range ws.Rows {
		r := &ws.Rows[i]
		t := r.Table
		if t == nil {
			return fmt.Errorf("row %d has no table", i)
		}
		if r.Values != nil && len(r.Values) != len(t.Columns) {
			return fmt.Errorf("row %d: %d values for %d columns", i, len(r.Values), len(t.Columns))
		}
		for _, k := range t.KeyColumns {
			if k < 0 || k >= len(t.Columns) {
				return fmt.Errorf("row %d: key column %d of %d", i, k, len(t.Columns))
			}
		}
		switch r.Op {
		case capture.OpUpdate, capture.OpDelete:
			if r.OldValues == nil && r.Values == nil {
				return fmt.Errorf("row %d: %s without values", i, r.Op)
			}
			if len(r.KeyValues()) != len(t.KeyColumns) {
				return fmt.Errorf("row %d: %s with %d key values for %d key columns", i, r.Op, len(r.KeyValues()), len(t.KeyColumns))
			}
		}
	}
	return nil
}
