package replica

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// sysbenchKeys are the keys of a sysbench oltp_read_write transaction
// under dbsm: 4 ranges of 100 ids, 10 point reads, and the rows of 2
// updates, a delete and an insert, on one table.
func sysbenchKeys() []txn.KeyMode {
	var out []txn.KeyMode
	add := func(id int, m txn.Mode) {
		out = append(out, txn.KeyMode{Key: txn.Key{Level: txn.LevelRow, Schema: "public", Table: "sbtest1", Column: "id", Value: strconv.Itoa(id)}, Mode: m})
	}
	for r := range 4 {
		for id := 1000 * r; id < 1000*r+100; id++ {
			add(id, txn.S)
		}
	}
	for i := range 10 {
		add(5000+i*7, txn.S)
	}
	for i := range 4 {
		add(9000+i, txn.X)
	}
	return out
}

// BenchmarkEntryKeys encodes and decodes the keys of a transaction as its
// origin proposes them and every node delivers them (entry-bytes: the
// entry's size).
func BenchmarkEntryKeys(b *testing.B) {
	t := &Txn{GID: "ordo_1_2_3", Keys: sysbenchKeys()}
	payload, err := encodeTxn(t, "dbsm", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeTxn(t, "dbsm", 0, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(payload)), "entry-bytes")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e ordov1.Entry
			if err := proto.Unmarshal(payload, &e); err != nil {
				b.Fatal(err)
			}
			if fromNewerVersion(&e) {
				b.Fatal("an entry of a newer version")
			}
			_ = decodeKeys(e.GetTxn())
		}
	})
}
