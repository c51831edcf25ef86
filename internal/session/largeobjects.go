package session

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/capture"
)

// Large objects are not decoded (their rows are system catalogs'). When
// the write probe says the open transaction changed any, the session
// finds which, before its PREPARE (capture/largeobject.go says how), and
// reads the state it left each of them in; that state travels in the
// write set, and every other node sets the objects to it.

// LargeObjectPeer finds what an open transaction deleted, on a connection
// that is not the transaction's own (capture.LargeObjectPeer).
type LargeObjectPeer interface {
	DeletedBy(ctx context.Context, xids string) ([]uint32, error)
}

// largeObjects returns the state the open transaction left the large
// objects it changed in, in oid order: meta, it changed rows of
// pg_largeobject_metadata (created, unlinked or altered objects); data,
// rows of pg_largeobject (their content). An error leaves the
// transaction to be rolled back.
func (s *session) largeObjects(ctx context.Context, meta, data bool) ([]capture.LargeObject, error) {
	if !meta && !data {
		return nil, nil
	}
	peer := s.h.cfg.LargeObjects
	if peer == nil {
		return nil, pgErr(codeFeatureNotSupported, "ordo: this transaction changed large objects, which this node cannot replicate (no large object reader configured); it was rolled back")
	}
	res, err := s.be.Exec(ctx, capture.LargeObjectsWrittenSQL(data))
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, loFailed(res.Err)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 3 {
		return nil, pgErr(codeInternal, "ordo: unexpected reply to the large objects' probe")
	}
	row := res.Rows[0] // NULLs read as ""
	var oids []uint32
	for _, v := range row[1:] {
		o, err := capture.ParseOIDArray(v)
		if err != nil {
			return nil, err
		}
		oids = append(oids, o...)
	}
	xids := row[0]
	if xids == "" {
		xids = "{}"
	}
	deleted, err := peer.DeletedBy(ctx, xids)
	if err != nil {
		return nil, pgErr(codeSerializationFailure, "ordo: could not find the large objects this transaction deleted (it was rolled back): %v", err)
	}
	oids = append(oids, deleted...)
	slices.Sort(oids)
	oids = slices.Compact(oids)
	if len(oids) == 0 {
		return nil, nil // created and unlinked again, or rolled back to a savepoint
	}
	res, err = s.be.Exec(ctx, capture.LargeObjectStateSQL(oids))
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, loFailed(res.Err)
	}
	seen := map[uint32]capture.LargeObject{}
	size := int64(0)
	for _, r := range res.Rows {
		if len(r) != 6 {
			return nil, pgErr(codeInternal, "ordo: unexpected reply reading large objects")
		}
		oid, err := strconv.ParseUint(r[0], 10, 32)
		if err != nil {
			return nil, pgErr(codeInternal, "ordo: unexpected large object oid %q", r[0])
		}
		lo := capture.LargeObject{OID: uint32(oid), Owner: r[1], ACL: r[2], HasComment: r[3] == "t", Comment: r[4]}
		if lo.Data, err = base64.StdEncoding.DecodeString(r[5]); err != nil {
			return nil, pgErr(codeInternal, "ordo: large object %d: %v", oid, err)
		}
		size += int64(len(lo.Data))
		if max := s.h.cfg.MaxWriteSetBytes; max > 0 && size > max {
			return nil, pgErr(codeProgramLimitExceeded,
				"ordo: the large objects this transaction changed hold more than max_write_set_bytes (%d bytes); it was rolled back (split it, or raise max_write_set_bytes on every node)", max)
		}
		seen[lo.OID] = lo
	}
	out := make([]capture.LargeObject, 0, len(oids))
	for _, o := range oids {
		if lo, ok := seen[o]; ok {
			out = append(out, lo)
		} else {
			out = append(out, capture.LargeObject{OID: o, Unlinked: true})
		}
	}
	return out, nil
}

// loFailed is the error of reading a transaction's large objects: its
// role may change one it may not read.
func loFailed(err error) error {
	if canceled(err) {
		return errBruteForce
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		e := *pe
		e.Message = fmt.Sprintf("ordo: this transaction changed a large object its role may not read, and Ordo replicates a large object by reading it (%s); it was rolled back", pe.Message)
		return &e
	}
	return err
}
