package session

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"

	"github.com/ordo-db/ordo/internal/capture"
)

// Large objects are not decoded (their rows are system catalogs'). When
// the write probe says the open transaction changed any, the session
// finds which, before its PREPARE (capture/largeobject.go says how), and
// reads the state it left each of them in; that state travels in the
// write set, and every other node sets the objects to it.

// LargeObjectPeer finds what an open transaction deleted, and names a
// function called through the fast path (functioncall.go), on a
// connection that is not the transaction's own (capture.LargeObjectPeer).
type LargeObjectPeer interface {
	DeletedBy(ctx context.Context, xids string) ([]uint32, error)
	FunctionName(ctx context.Context, oid uint32) (schema, name string, err error)
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
	res, err := s.execOwn(ctx, loReading, capture.LargeObjectsWrittenSQL(data))
	if err != nil {
		return nil, err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 3 {
		return nil, pgErr(codeInternal, "ordo: unexpected reply to the large objects' probe")
	}
	row := res.Rows[0] // NULLs read as ""
	metaWritten, err := capture.ParseOIDArray(row[1])
	if err != nil {
		return nil, err
	}
	dataWritten, err := capture.ParseOIDArray(row[2])
	if err != nil {
		return nil, err
	}
	xids := row[0]
	if xids == "" {
		xids = "{}"
	}
	deleted, err := peer.DeletedBy(ctx, xids)
	if err != nil {
		return nil, pgErr(codeSerializationFailure, "ordo: could not find the large objects this transaction deleted (it was rolled back): %v", err)
	}
	// Its content is new for those it created (their metadata is its
	// own, and no other snapshot sees an older version of it) and those
	// whose pages it wrote; the others it altered (owner, privileges,
	// comment) or unlinked.
	content := map[uint32]bool{}
	for _, o := range metaWritten {
		if !slices.Contains(deleted, o) {
			content[o] = true
		}
	}
	for _, o := range dataWritten {
		content[o] = true
	}
	oids := slices.Concat(metaWritten, dataWritten, deleted)
	slices.Sort(oids)
	oids = slices.Compact(oids)
	if len(oids) == 0 {
		return nil, nil // created and unlinked again, or rolled back to a savepoint
	}
	res, err = s.execOwn(ctx, loReading, capture.LargeObjectStateSQL(oids))
	if err != nil {
		return nil, err
	}
	seen := map[uint32]*capture.LargeObject{}
	var withContent []uint32
	for _, r := range res.Rows {
		if len(r) != 5 {
			return nil, pgErr(codeInternal, "ordo: unexpected reply reading large objects")
		}
		oid, err := strconv.ParseUint(r[0], 10, 32)
		if err != nil {
			return nil, pgErr(codeInternal, "ordo: unexpected large object oid %q", r[0])
		}
		lo := &capture.LargeObject{OID: uint32(oid), Owner: r[1], ACL: r[2], HasComment: r[3] == "t", Comment: r[4], Content: content[uint32(oid)]}
		seen[lo.OID] = lo
		if lo.Content {
			withContent = append(withContent, lo.OID)
		}
	}
	if len(withContent) > 0 {
		if err := s.largeObjectPages(ctx, withContent, seen); err != nil {
			return nil, err
		}
	}
	out := make([]capture.LargeObject, 0, len(oids))
	for _, o := range oids {
		if lo, ok := seen[o]; ok {
			out = append(out, *lo)
		} else {
			out = append(out, capture.LargeObject{OID: o, Unlinked: true})
		}
	}
	return out, nil
}

// largeObjectPages reads the stored pages of the objects in oids into
// their Pieces, once their size is known to be within the limit.
func (s *session) largeObjectPages(ctx context.Context, oids []uint32, los map[uint32]*capture.LargeObject) error {
	if max := s.h.cfg.MaxWriteSetBytes; max > 0 {
		res, err := s.execOwn(ctx, loReading, "SELECT coalesce(sum(pg_catalog.octet_length(p.data)), 0) FROM pg_catalog.unnest('"+capture.OIDArray(oids)+"'::pg_catalog.oid[]) o, LATERAL _ordo.lo_pages(o) p")
		if err != nil {
			return err
		}
		if len(res.Rows) == 1 && len(res.Rows[0]) == 1 {
			if n, _ := strconv.ParseInt(res.Rows[0][0], 10, 64); n > max {
				return pgErr(codeProgramLimitExceeded,
					"ordo: the large objects this transaction wrote hold %d bytes, more than max_write_set_bytes (%d); it was rolled back (split it, or raise max_write_set_bytes on every node)", n, max)
			}
		}
	}
	res, err := s.execOwn(ctx, loReading, capture.LargeObjectPagesSQL(oids))
	if err != nil {
		return err
	}
	for _, r := range res.Rows {
		if len(r) != 3 {
			return pgErr(codeInternal, "ordo: unexpected reply reading large objects' pages")
		}
		oid, err1 := strconv.ParseUint(r[0], 10, 32)
		off, err2 := strconv.ParseInt(r[1], 10, 64)
		data, err3 := base64.StdEncoding.DecodeString(r[2])
		lo := los[uint32(oid)]
		if err := errors.Join(err1, err2, err3); err != nil || lo == nil {
			return pgErr(codeInternal, "ordo: unexpected page of large object %q: %v", r[0], err)
		}
		lo.AddStoredPage(off, data)
	}
	return nil
}

// loReading names Ordo's reading of a transaction's large objects in
// its errors.
const loReading = "reading the large objects this transaction changed"
