package wire

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"
)

// runSplit runs a Query the hooks split into pieces (see Split). It runs on
// the session goroutine, after the hooks were called for the Query.
// atBoundary: the Query began a unit. Sent inside an extended-protocol
// batch (not at a boundary), its first piece runs in the batch's implicit
// transaction, as the whole Query would, and PostgreSQL ends the batch at
// that piece's ReadyForQuery (or, if the hooks answer it, at a Sync of
// Ordo's): the pieces after it begin at a boundary. (Every piece was
// taken for one at a boundary: a BEGIN first in a string sent after a
// statement of the batch had its level set where PostgreSQL refuses it,
// 25001, and the client's transaction failed.)
func (ss *session) runSplit(sp *Split, atBoundary bool) error {
	ss.syncInUnit() // (each piece ends with a Sync of Ordo's)
	lost := func(err error) error { return fmt.Errorf("%w: %w", errBackendLost, err) }
	pieces := sp.Pieces
	for i, piece := range pieces {
		last := i == len(pieces)-1
		ss.stmt = Statement{Kind: KindQuery, SQL: piece, Piece: i + 1, Pieces: len(pieces), AtBoundary: atBoundary || i > 0}
		err := ss.callStatement()
		if err != nil {
			var c *Completed
			if errors.As(err, &c) {
				midBatch := ss.batchOpen
				if midBatch {
					// PostgreSQL would end the batch at this piece (as in
					// the Query case of run).
					ss.sendQuietSync()
				}
				if err := ss.flushServer(); err != nil {
					return lost(err)
				}
				if err := ss.waitIdle(ss.ctx); err != nil {
					return nil
				}
				if midBatch {
					ss.endBatch()
				}
				if t := ss.heldTag.Swap(nil); t != nil {
					ss.writeClient(t) // an earlier piece's, before this one's
				}
				ss.writeCompleted(c)
				if last {
					return ss.endSplit(false)
				}
				continue
			}
			// Refused: PostgreSQL fails at this point, and the rest is
			// not run.
			if i == 0 {
				ss.closeUnnamed() // as the Query would have, had it reached PostgreSQL
			}
			ss.outstanding.Add(1)
			ss.sendTracked(&pgproto3.Describe{ObjectType: 'P', Name: ss.newRejection(err)})
			ss.sendTracked(&pgproto3.Sync{})
			return ss.endSplit(true)
		}
		sql := piece
		if ss.rewrite != "" {
			sql = ss.rewrite
		}
		if i < len(sp.Offsets) {
			// (Ordo's own statements run before it are answered: the
			// next error is this piece's, or its commit's.)
			ss.notePositions(sp.Offsets[i])
		}
		ss.sawError.Store(false)
		ss.quietReady.Store(!last && !ss.hold.Load())
		ss.outstanding.Add(1)
		ss.sendTracked(&pgproto3.Query{String: sql})
		if last {
			if ss.hold.Load() {
				return ss.finishHeld()
			}
			return nil // its ReadyForQuery is relayed as any Query's
		}
		if err := ss.flushServer(); err != nil {
			return lost(err)
		}
		if ended, err := ss.awaitPiece(); err != nil || ended {
			return err
		}
		if ss.batchOpen {
			ss.endBatch() // (the piece's ReadyForQuery)
		}
		if ss.sawError.Load() {
			return ss.endSplit(false) // PostgreSQL would skip the rest
		}
	}
	return nil
}

// endSplit ends a split query early (after a failed piece) or after an
// answered last piece: the held ReadyForQuery is released, or one is sent.
// sent: a Sync whose ReadyForQuery is still to come was sent last.
func (ss *session) endSplit(sent bool) error {
	if ss.hold.Load() {
		return ss.finishHeld()
	}
	if sent {
		return nil // its ReadyForQuery is relayed
	}
	if err := ss.flushServer(); err != nil {
		return fmt.Errorf("%w: %w", errBackendLost, err)
	}
	if err := ss.waitIdle(ss.ctx); err != nil {
		return nil
	}
	ss.writeClient(&pgproto3.ReadyForQuery{TxStatus: byte(ss.txStatus.Load())})
	return nil
}

// awaitPiece waits for the ReadyForQuery of a piece of a split query
// that is not its last. A COPY … FROM STDIN in it (psql -c "BEGIN; COPY
// … FROM STDIN; COMMIT") waits for the client's data first, which the
// client sends once it sees the CopyInResponse: it is relayed here, up
// to the client's CopyDone or CopyFail, as clientLoop relays a COPY's
// data (the session hung, waiting for the piece while the data waited to
// be read). ended: the session is ending.
func (ss *session) awaitPiece() (ended bool, err error) {
	for {
		if err := ss.waitUntil(ss.ctx, func() bool { return ss.outstanding.Load() <= 0 || ss.copyOpen() }); err != nil {
			return true, nil
		}
		if ss.outstanding.Load() <= 0 {
			return false, nil
		}
		if ended, err := ss.copyInPiece(); err != nil || ended {
			return true, err
		}
		if ss.unread != nil {
			// The COPY failed, and the client went on: the piece's
			// ReadyForQuery follows its error.
			if err := ss.waitIdle(ss.ctx); err != nil {
				return true, nil
			}
			return false, nil
		}
	}
}

// copyInPiece relays the client's messages to PostgreSQL while it waits
// for a piece's COPY data, up to the client's CopyDone or CopyFail
// (copyEnds counts it, as clientLoop does). PostgreSQL ignores a Flush or
// a Sync there; any other message is a protocol violation, which goes to
// PostgreSQL as it came, as in clientLoop (duringCopy): PostgreSQL
// answers 08P01 and ends the session. Once the COPY failed (an error the
// client may have seen), PostgreSQL is out of COPY mode and drops COPY
// messages: the client's next other message, or Sync, is the client's
// next unit, left for clientLoop (unread) once the split ends. ended: the
// session is ending.
func (ss *session) copyInPiece() (ended bool, err error) {
	for {
		msg, ended, err := ss.readClient()
		if err != nil || ended {
			return true, err
		}
		if _, sync := msg.(*pgproto3.Sync); (sync || notCopyData(msg)) && ss.sawError.Load() {
			ss.unread = msg
			ss.copyEnds++ // (ended by its error: nothing waits for its CopyDone)
			return false, nil
		}
		ss.sendServer(msg)
		switch msg.(type) {
		case *pgproto3.CopyData, *pgproto3.Flush, *pgproto3.Sync:
			if len(ss.sbuf) >= flushThreshold {
				if err := ss.flushServer(); err != nil {
					return true, fmt.Errorf("%w: %w", errBackendLost, err)
				}
			}
			continue
		case *pgproto3.CopyDone, *pgproto3.CopyFail:
			ss.copyEnds++
		case *pgproto3.Terminate:
			ss.clientLeft.Store(true)
			_ = ss.flushServer()
			return true, errClientLeft
		}
		if err := ss.flushServer(); err != nil {
			return true, fmt.Errorf("%w: %w", errBackendLost, err)
		}
		return false, nil
	}
}

// errClientLeft: the client sent Terminate where clientLoop did not read
// it; the session ends as at one it reads.
var errClientLeft = errors.New("wire: the client left")
