package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// State transfer, the donor's side. A joining node copies this node's
// replicated database as of an applied prefix S, then replays the order
// from there (docs/membership.md). The copy is a PostgreSQL exported
// snapshot (pg_export_snapshot) of the same kind the data checks take
// (snapshotAt): the delivery loop takes it between two batches, when
// everything it was delivered is carried out and its proof rows are
// written, so the snapshot holds exactly the prefix its proof rows prove.
// S is that proven prefix as the snapshot sees it (the largest seqno in
// _ordo.applied, what a restarted node would replay from). The loop is
// held only for the time it takes to open the transaction; the donor then
// keeps serving while the joiner reads the snapshot.

// Export is an exported snapshot of this node's database at the proven
// prefix Seqno. It stays importable (SET TRANSACTION SNAPSHOT) until Close.
type Export struct {
	// Snapshot is the snapshot's name for SET TRANSACTION SNAPSHOT and
	// pg_dump --snapshot.
	Snapshot string
	// Seqno is the applied prefix the snapshot holds.
	Seqno uint64
	conn  *pgx.Conn
}

// Close ends the exporting transaction: the snapshot can no longer be
// imported (importers that already imported it keep it).
func (e *Export) Close() { e.conn.Close(context.Background()) }

type exportReq struct {
	ctx context.Context
	res chan exportRes
}

type exportRes struct {
	exp *Export
	err error
}

// ErrNotRunning is returned by ExportSnapshot when the delivery loop is
// not running (it failed or stopped).
var ErrNotRunning = errors.New("replica: the delivery loop is not running")

// ExportSnapshot has the delivery loop export a snapshot between two
// batches and returns it; the caller must Close it.
func (r *Replica) ExportSnapshot(ctx context.Context) (*Export, error) {
	req := exportReq{ctx: ctx, res: make(chan exportRes, 1)}
	select {
	case r.exportc <- req:
	case <-r.down:
		return nil, ErrNotRunning
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-req.res:
		return res.exp, res.err
	case <-ctx.Done():
		go func() { // the loop answers anyway: close what nobody takes
			if res := <-req.res; res.exp != nil {
				res.exp.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// export runs on the delivery loop, between batches.
func (r *Replica) export(ctx context.Context) (*Export, error) {
	conn, err := r.snapshotAt(ctx)
	if err != nil {
		return nil, fmt.Errorf("replica: export a snapshot: %w", err)
	}
	var (
		name string
		s    int64
	)
	if err := conn.QueryRow(ctx, "SELECT pg_export_snapshot(), coalesce(max(seqno), 0) FROM _ordo.applied").Scan(&name, &s); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("replica: export a snapshot: %w", err)
	}
	return &Export{Snapshot: name, Seqno: uint64(s), conn: conn}, nil
}
