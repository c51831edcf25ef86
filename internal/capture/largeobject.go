package capture

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/txn"
)

// Large objects live in two system catalogs (pg_largeobject_metadata, one
// row per object; pg_largeobject, its data in pages of 2 KiB), and logical
// decoding carries no system catalog. So a transaction's large objects are
// not in its decoded write set: the origin's session finds, before its
// PREPARE, every large object the transaction created, changed or unlinked,
// reads the state it left each of them in (owner, privileges, comment,
// content), and the write set carries that state (WriteSet.LargeObjects).
// Every node that applies it sets each object to that state; certification
// takes X on a key per object (LargeObjectKey).
//
// Finding them is exact, whatever ran the functions (a statement, the
// fast-path interface, a trigger, a function): the transaction's own
// statistics say whether it inserted, updated or deleted catalog rows of
// either (pg_stat_get_xact_tuples_*, LargeObjectProbe); if it did, its
// xids (the transaction ids it holds locks on, subtransactions' included)
// name the rows. Those it wrote, it sees itself with xmin among them: the
// metadata of an object it created or altered, every page it wrote (a
// truncation writes the page it ends in, even in a hole). Those it
// deleted, it no longer sees, but any other connection does, with xmax
// among them, until it commits (LargeObjectPeer): an object's metadata
// goes only when the object is unlinked, and its pages with it.

// OIDs of the two catalogs, fixed in every PostgreSQL.
const (
	largeObjectOID         = 2613 // pg_catalog.pg_largeobject
	largeObjectMetadataOID = 2995 // pg_catalog.pg_largeobject_metadata
)

// LargeObjectProbe is a select-list expression pair for the write probe:
// whether the open transaction changed rows of pg_largeobject_metadata
// (objects created, unlinked, altered), then of pg_largeobject (data). Its
// statistics count rows of subtransactions rolled back as well, which only
// costs a needless look.
var LargeObjectProbe = xactRowsChanged(largeObjectMetadataOID) + ", " + xactRowsChanged(largeObjectOID)

// LargeObjectsChanged is one boolean expression: whether either of
// LargeObjectProbe's is true.
var LargeObjectsChanged = "(" + xactRowsChanged(largeObjectMetadataOID) + " OR " + xactRowsChanged(largeObjectOID) + ")"

// xactRowsChanged is whether the open transaction changed rows of the
// catalog whose oid is rel, as its statistics count them.
func xactRowsChanged(rel int) string {
	oid := strconv.Itoa(rel)
	return "pg_catalog.pg_stat_get_xact_tuples_inserted(" + oid + ") + " +
		"pg_catalog.pg_stat_get_xact_tuples_updated(" + oid + ") + " +
		"pg_catalog.pg_stat_get_xact_tuples_deleted(" + oid + ") > 0"
}

// LargeObjectsWrittenSQL, run in the transaction, returns its xids (an
// array literal of xid) and the objects whose metadata it wrote (created,
// or altered); and, when $pages (a literal substituted by the caller) is
// true, those whose data it wrote (_ordo.lo_written, which reads
// pg_largeobject for any role but reveals only the caller's own writes).
func LargeObjectsWrittenSQL(pages bool) string {
	written := "NULL::text"
	if pages {
		written = "(SELECT pg_catalog.array_agg(o)::text FROM _ordo.lo_written() o)"
	}
	return `SELECT x.xids::text,
  (SELECT pg_catalog.array_agg(m.oid)::text FROM pg_catalog.pg_largeobject_metadata m WHERE m.xmin = ANY (x.xids)),
  ` + written + `
FROM (SELECT pg_catalog.array_agg(transactionid) AS xids FROM pg_catalog.pg_locks
      WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'transactionid') x`
}

// LargeObjectStateSQL, run in the transaction, reads the state of the
// objects in oids that it sees: oid, owner, privileges ("" for the
// default, NULL), whether it has a comment, and the comment, ordered by
// oid. An object it does not see was unlinked.
func LargeObjectStateSQL(oids []uint32) string {
	return `SELECT m.oid, pg_catalog.pg_get_userbyid(m.lomowner), coalesce(m.lomacl::text, ''),
  c.d IS NOT NULL, coalesce(c.d, '')
FROM pg_catalog.pg_largeobject_metadata m, LATERAL (SELECT pg_catalog.obj_description(m.oid, 'pg_largeobject') AS d) c
WHERE m.oid = ANY ('` + OIDArray(oids) + `'::pg_catalog.oid[]) ORDER BY m.oid`
}

// LargeObjectPagesSQL, run in the transaction, reads the stored pages of
// the objects in oids whose content it wrote (_ordo.lo_pages): oid, the
// page's offset in the object and its data (base64), in oid and offset
// order (LargeObject.AddStoredPage takes them). Pages are what PostgreSQL stores: a sparse object's holes have
// none, and an object of several gigabytes is read a page at a time
// (lo_get refuses more than 1 GB).
func LargeObjectPagesSQL(oids []uint32) string {
	return `SELECT o, p.off, pg_catalog.encode(p.data, 'base64')
FROM pg_catalog.unnest('` + OIDArray(oids) + `'::pg_catalog.oid[]) o, LATERAL _ordo.lo_pages(o) p ORDER BY o, p.off`
}

// LargeObjectPiece is a run of a large object's stored content.
type LargeObjectPiece struct {
	Offset int64
	Data   []byte
}

// maxPiece bounds a piece AddPage joins pages into: an apply writes each
// with one statement.
const maxPiece = 4 << 20

// AddPage appends a stored page at off to pieces, joining it to the last
// piece when that one ends at off (up to maxPiece).
func AddPage(pieces []LargeObjectPiece, off int64, data []byte) []LargeObjectPiece {
	if n := len(pieces); n > 0 && pieces[n-1].Offset+int64(len(pieces[n-1].Data)) == off && len(pieces[n-1].Data)+len(data) <= maxPiece {
		pieces[n-1].Data = append(pieces[n-1].Data, data...)
		return pieces
	}
	return append(pieces, LargeObjectPiece{Offset: off, Data: append([]byte(nil), data...)})
}

// OIDArray renders oids as the text of an array literal.
func OIDArray(oids []uint32) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, o := range oids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(o), 10))
	}
	b.WriteByte('}')
	return b.String()
}

// ParseOIDArray reads the text of an array of oids ("" or NULL: none).
func ParseOIDArray(s string) ([]uint32, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("capture: not an array of oids: %q", s)
	}
	var out []uint32
	for _, f := range strings.Split(s[1:len(s)-1], ",") {
		if f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("capture: not an array of oids: %q", s)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

// LargeObject is the state a transaction left one large object in.
type LargeObject struct {
	OID uint32
	// Unlinked: the transaction unlinked it (or created and unlinked it);
	// nothing else is set.
	Unlinked bool
	// Owner is the owning role's name; ACL the privileges as aclitem[]
	// text, "" for the default (NULL).
	Owner, ACL string
	// Comment is its comment, if HasComment.
	Comment    string
	HasComment bool
	// Content: the transaction wrote its content, which is Pieces (the
	// object's stored runs of data, in offset order; holes between them
	// read as zeros) up to Size (PostgreSQL's size of a large object is
	// where its last stored page ends, which may hold no data). Without
	// it only the object's metadata changed.
	Content bool
	Pieces  []LargeObjectPiece
	Size    int64
}

// AddStoredPage adds a stored page at off to lo's content: its data to
// Pieces, its end to Size.
func (lo *LargeObject) AddStoredPage(off int64, data []byte) {
	if len(data) > 0 {
		lo.Pieces = AddPage(lo.Pieces, off, data)
	}
	lo.Size = max(lo.Size, off+int64(len(data)))
}

// Bytes is the size of the content lo carries.
func (lo *LargeObject) Bytes() int64 {
	n := int64(0)
	for _, p := range lo.Pieces {
		n += int64(len(p.Data))
	}
	return n
}

// LargeObjectKey is the certification key of one large object: a row of
// pg_catalog.pg_largeobject_metadata, keyed by its oid, the same on every
// node.
func LargeObjectKey(oid uint32) txn.Key {
	return txn.RowKey("pg_catalog", "pg_largeobject_metadata", strconv.FormatUint(uint64(oid), 10))
}

// LargeObjectsTable is the table key that stands for every large object
// (a read of large objects, under protocols that certify reads).
func LargeObjectsTable() txn.Key { return txn.TableKey("pg_catalog", "pg_largeobject_metadata") }

// LargeObjectPeer finds, on a connection of its own, what an open
// transaction of another session deleted: those rows it no longer sees
// itself, but every other snapshot still does, with the transaction's xid
// as xmax, until it commits. It also names the functions a session calls
// through the fast path (libpq's and pgjdbc's large object functions)
// without running a query on the session's backend, where it could take
// the snapshot of the client's block. It is safe for concurrent use (one
// query at a time).
type LargeObjectPeer struct {
	dsn  string
	mu   sync.Mutex
	conn *pgx.Conn
}

// NewLargeObjectPeer returns a peer that connects to dsn (the node's
// own) when first used.
func NewLargeObjectPeer(dsn string) *LargeObjectPeer { return &LargeObjectPeer{dsn: dsn} }

// queryRow runs q on the peer's connection (p.mu held), connecting
// first if needed; a failed query drops the connection.
func (p *LargeObjectPeer) queryRow(ctx context.Context, what, q string, args []any, dest ...any) error {
	if p.conn == nil || p.conn.IsClosed() {
		c, err := pgx.Connect(ctx, p.dsn)
		if err != nil {
			return fmt.Errorf("capture: %s: connect: %w", what, err)
		}
		p.conn = c
	}
	if err := p.conn.QueryRow(ctx, q, args...).Scan(dest...); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			p.conn.Close(context.Background())
			p.conn = nil
		}
		return fmt.Errorf("capture: %s: %w", what, err)
	}
	return nil
}

// DeletedBy returns the large objects whose metadata rows the transaction
// holding xids (an array literal of xid) deleted or replaced (unlinked or
// altered: the caller tells them apart by what it still sees).
func (p *LargeObjectPeer) DeletedBy(ctx context.Context, xids string) ([]uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := `SELECT pg_catalog.array_agg(oid)::text FROM pg_catalog.pg_largeobject_metadata WHERE xmax = ANY ($1::pg_catalog.xid[])`
	var m *string
	if err := p.queryRow(ctx, "large objects deleted by "+xids, q, []any{xids}, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, nil
	}
	return ParseOIDArray(*m)
}

// FunctionName returns the schema and name of the function with the
// given OID, as committed (a function created by a transaction still
// open is not found: pgx.ErrNoRows, wrapped).
func (p *LargeObjectPeer) FunctionName(ctx context.Context, oid uint32) (schema, name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := `SELECT n.nspname, p.proname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = $1`
	err = p.queryRow(ctx, fmt.Sprintf("function %d", oid), q, []any{oid}, &schema, &name)
	return schema, name, err
}

// Close closes the peer's connection.
func (p *LargeObjectPeer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.Close(context.Background())
		p.conn = nil
	}
}
