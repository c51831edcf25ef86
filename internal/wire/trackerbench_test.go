package wire

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// BenchmarkTrackerUnit: the tracker's work for one prepared statement's
// unit (Bind, Execute, Sync and their replies), as pgbench -M prepared
// sends it.
func BenchmarkTrackerUnit(b *testing.B) {
	var u unnamedTracker
	bind := &pgproto3.Bind{PreparedStatement: "P0_1"}
	exec := &pgproto3.Execute{}
	sync := &pgproto3.Sync{}
	replies := []pgproto3.BackendMessage{&pgproto3.BindComplete{}, &pgproto3.DataRow{}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}}
	b.ReportAllocs()
	for b.Loop() {
		u.sent(bind)
		u.sent(exec)
		u.sent(sync)
		for _, r := range replies {
			u.reply(r)
		}
	}
}
