package replica

import (
	"context"

	"github.com/jackc/pglogrepl"
)

// Applies and the loop's COMMIT PREPARED run with synchronous_commit =
// off: their WAL reaches the disk a little later. The total order may
// compact its log below what every node says it applied, so a node says
// so only once the WAL that carried it is flushed: if PostgreSQL then lost
// an unflushed tail in a crash, the entries to replay are still in the log.

// walMark is a carried-out seqno and the WAL insert position once it was.
type walMark struct {
	seqno uint64
	lsn   pglogrepl.LSN
}

// markDurable notes that everything up to seqno is carried out, and tells
// the total order the largest noted seqno whose WAL PostgreSQL has
// flushed (delivery loop, once per batch). A failure to ask only delays
// compaction.
func (r *Replica) markDurable(ctx context.Context, seqno uint64) {
	var insert, flush string
	if err := r.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text").Scan(&insert, &flush); err != nil {
		r.log.Debug("replica: read the WAL position", "err", err)
		return
	}
	ins, err1 := pglogrepl.ParseLSN(insert)
	fl, err2 := pglogrepl.ParseLSN(flush)
	if err1 != nil || err2 != nil {
		r.log.Warn("replica: unexpected WAL position", "insert", insert, "flush", flush)
		return
	}
	if n := len(r.marks); n == 0 || r.marks[n-1].seqno < seqno {
		r.marks = append(r.marks, walMark{seqno, ins})
	}
	durable := uint64(0)
	i := 0
	for ; i < len(r.marks) && r.marks[i].lsn <= fl; i++ {
		durable = r.marks[i].seqno
	}
	r.marks = r.marks[i:]
	if durable > 0 {
		r.cfg.Order.MarkApplied(durable)
	}
}
