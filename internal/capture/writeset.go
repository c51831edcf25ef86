package capture

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/ordo-db/ordo/internal/txn"
)

// Op is the operation of one row change.
type Op uint8

// Row operations.
const (
	OpInsert Op = iota + 1
	OpUpdate
	OpDelete
	// OpTruncate is a table-level write: the row's Table was truncated.
	// One TRUNCATE statement yields one row per table it emptied (cascaded
	// tables included), all with the same TruncateGroup; they must be
	// applied together, in one statement, or foreign keys between them
	// refuse it.
	OpTruncate
)

// String returns "insert", "update", "delete" or "truncate".
func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpTruncate:
		return "truncate"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Column describes one column of a replicated table as the origin's
// decoder saw it. TypeOID is the origin's OID, for diagnostics only: it is
// never used to apply (OIDs differ between nodes).
type Column struct {
	Name    string
	TypeOID uint32
	Key     bool // part of the primary key (replica identity)
}

// Table is a replicated table at the time a row change was decoded. Rows
// of one write set share *Table values; a Table is never mutated after it
// is handed out.
type Table struct {
	Schema  string
	Name    string
	Columns []Column
	// KeyColumns are indexes into Columns of the primary key, in key order.
	KeyColumns []int
	// Uniques are the table's other unique indexes, as the origin's
	// catalog knew them when the relation was decoded.
	Uniques []Unique
	// ForeignKeys are the table's foreign keys, likewise.
	ForeignKeys []ForeignKey
}

// ForeignKey is a foreign key of a table. A row written with its columns
// all non-NULL references a parent row, which a concurrent transaction
// must not delete: the row takes R on the parent's row key (R conflicts
// with X, the mode of a delete, and not with other references).
type ForeignKey struct {
	ParentSchema, ParentTable string
	// Columns are indexes into Table.Columns, in the order of the parent's
	// primary key columns they reference.
	Columns []int
	// ToPrimaryKey is false when the foreign key references another
	// unique constraint of the parent: a delete carries only the parent's
	// primary key, so the reference cannot be named by row; it takes R on
	// the parent's table key instead (conflicting only with TRUNCATE and
	// DDL of the parent).
	ToPrimaryKey bool
}

// referenceKeys adds to s the R keys of the parent rows an inserted or
// updated row references.
func referenceKeys(s *txn.KeySet, r *Row) {
	for _, fk := range r.Table.ForeignKeys {
		if !fk.ToPrimaryKey {
			s.Add(txn.TableKey(fk.ParentSchema, fk.ParentTable), txn.R)
			continue
		}
		vals := make([]string, len(fk.Columns))
		ok := true
		for i, c := range fk.Columns {
			v := r.Values[c]
			if v.Kind != Text { // NULL: no reference (MATCH SIMPLE); Unchanged: not a new one
				ok = false
				break
			}
			vals[i] = v.Text
		}
		if ok {
			s.Add(txn.RowKey(fk.ParentSchema, fk.ParentTable, vals...), txn.R)
			// R on the parent's table too, so a transaction holding X on
			// the whole parent table (TRUNCATE, DDL, escalated keys)
			// conflicts with the reference.
			s.Add(txn.TableKey(fk.ParentSchema, fk.ParentTable), txn.R)
		}
	}
}

// Unique is a unique index other than the primary key. Two transactions
// that give two rows the same values of one must not both commit, so its
// values are a certification key (txn.UniqueKey).
type Unique struct {
	Name string
	// Columns are indexes into Table.Columns, in index order.
	Columns []int
	// NullsNotDistinct: NULL values collide too (PostgreSQL 15's NULLS NOT
	// DISTINCT); otherwise a row with a NULL in the index never collides.
	NullsNotDistinct bool
	// Opaque: an expression or partial index, whose values the capture
	// cannot compute; every written row takes its one index-wide key, so
	// concurrent writers of the table conflict (conservative).
	Opaque bool
}

// uniqueKeys adds to s the unique-index keys of an inserted or updated
// row: the new values it claims.
func uniqueKeys(s *txn.KeySet, r *Row) {
	for _, u := range r.Table.Uniques {
		if u.Opaque {
			s.Add(txn.UniqueKey(r.Table.Schema, r.Table.Name, u.Name), txn.X)
			continue
		}
		vals := make([]string, len(u.Columns))
		ok := true
		for i, c := range u.Columns {
			v := r.Values[c]
			switch {
			case v.Kind == Unchanged:
				// A TOASTed value the update left alone: not a new claim.
				ok = false
			case v.Kind == Null && !u.NullsNotDistinct:
				ok = false
			case v.Kind == Null:
				vals[i] = `\N` // shared with the text value \N: at worst a false conflict
			default:
				vals[i] = v.Text
			}
		}
		if ok {
			s.Add(txn.UniqueKey(r.Table.Schema, r.Table.Name, u.Name, vals...), txn.X)
		}
	}
}

// TableKey returns the certification key of the whole table.
func (t *Table) TableKey() txn.Key { return txn.TableKey(t.Schema, t.Name) }

// String returns schema.name.
func (t *Table) String() string { return t.Schema + "." + t.Name }

// ValueKind says what a Value holds.
type ValueKind uint8

// Value kinds.
const (
	// Null is SQL NULL.
	Null ValueKind = iota + 1
	// Text is a value in PostgreSQL's text output format.
	Text
	// Unchanged is a TOASTed value the update did not touch; PostgreSQL did
	// not send it. It must be left as it is, never applied as NULL.
	Unchanged
)

// Value is one column value of a row change.
type Value struct {
	Kind ValueKind
	Text string // for Kind == Text
}

// Row is one row change of a write set.
type Row struct {
	Op    Op
	Table *Table
	// Key is the row key (txn.RowKey) of the row after the change for
	// insert and update, of the deleted row for delete, and the table key
	// for truncate. An insert into a table without a primary key has none
	// (Level 0).
	Key txn.Key
	// OldKey is set (Level != 0) when an update changed the primary key:
	// the key of the row before the change.
	OldKey txn.Key
	// Values are, per Table.Columns, the new values for insert and update
	// and nil for delete and truncate.
	Values []Value
	// OldValues are the primary key values, in key order, of the row before
	// the change: for delete, and for an update that changed the key.
	OldValues []string
	// OldRow is, for an update or delete of a table without a primary key,
	// the whole row before the change, per Table.Columns (PostgreSQL sends
	// it for REPLICA IDENTITY FULL, which Ordo sets on such tables: see
	// ReplicaIdentitySQL). The row is found by these values on apply, and
	// its key is FullRowKey of them.
	OldRow []Value
	// TruncateGroup numbers the TRUNCATE statements of the write set from
	// 1; 0 for other operations.
	TruncateGroup int
	// Cascade and RestartIdentity are the options of the TRUNCATE.
	Cascade, RestartIdentity bool
}

// FullRowKey returns the row key of a row of a table without a primary
// key: a digest of all its values (a row has no other identity). Two
// transactions that change one row change the same values, so their keys
// collide; two identical rows share a key, which costs at worst a false
// conflict. The digest keeps keys small whatever the row's size.
func FullRowKey(t *Table, vals []Value) txn.Key {
	h := sha256.New()
	var n [4]byte
	for _, v := range vals {
		// Length-prefixed, with NULL (and a value left unsent) as kinds
		// no text value has.
		binary.BigEndian.PutUint32(n[:], uint32(len(v.Text)))
		h.Write([]byte{byte(v.Kind)})
		h.Write(n[:])
		h.Write([]byte(v.Text))
	}
	return txn.RowKey(t.Schema, t.Name, "row:"+hex.EncodeToString(h.Sum(nil)))
}

// KeyValues returns the primary key values, in key order, that identify the
// row to change on apply: OldValues when set, else the key columns of
// Values.
func (r *Row) KeyValues() []string {
	if r.OldValues != nil {
		return r.OldValues
	}
	out := make([]string, len(r.Table.KeyColumns))
	for i, c := range r.Table.KeyColumns {
		out[i] = r.Values[c].Text
	}
	return out
}

// WriteSet is everything one prepared transaction wrote to replicated
// tables, in the order PostgreSQL decoded it (the order of the changes in
// WAL, triggers and cascades included). Rows of Ordo's own bookkeeping tables
// (see Bookkeeping) are never part of a write set.
type WriteSet struct {
	GID txn.GID
	XID uint32
	// PrepareLSN and EndLSN are the origin's WAL positions of the PREPARE.
	PrepareLSN, EndLSN uint64
	Rows               []Row
	// Bytes is the size of the write set as counted against the limit:
	// the length of every value plus a fixed overhead per row.
	Bytes int64
	// DDL are schema-changing statements the transaction ran, in order.
	// Logical decoding does not carry DDL, so the origin's session records
	// them; an applier runs them, with SearchPath, among the rows where
	// they ran: statement i after the first DDLRowsBefore[i] rows (before
	// every row if DDLRowsBefore is shorter than DDL).
	DDL           []string
	DDLRowsBefore []int
	SearchPath    string
	// DDLSettings, when not nil, holds for each DDL statement the
	// settings it ran under on the origin (nil for none): the applier sets
	// them for its replay.
	DDLSettings [][]Setting
	// Label is the client's name for the transaction (SET
	// ordo.txn_label), recorded with its proof row.
	Label string
	// Notify are the notifications the transaction sent (NOTIFY, held by
	// the origin's session until its commit): every node that applies it
	// sends them, in its apply's transaction.
	Notify []Notification
	// DDLRecords are the DDL commands the transaction ran and did not
	// roll back, as its event triggers recorded them (DDLTriggerSQL), in
	// the order they ran. The session joins them with the statements it
	// saw to decide what DDL to replicate.
	DDLRecords []DDLRecord
	// DDLDropped are the objects its DDL dropped (for certification keys).
	DDLDropped []DDLObject
	// LargeObjects are the large objects the transaction created, changed
	// or unlinked, in the state it left them in (largeobject.go), in oid
	// order. Decoding does not fill them: the origin's session does.
	LargeObjects []LargeObject
}

// Keys returns the keys this write set writes, with X mode on row keys
// (new and old), on the unique-index values an inserted or updated row
// claims (Table.Uniques) and on table keys of truncated tables, R on the
// parent rows an inserted or updated row references (Table.ForeignKeys),
// and IX on the table key of every written row, and X on the key of each
// large object it changed (IX on theirs). Granule keys need
// configuration the capture does not have; the termination layer adds
// them.
func (ws *WriteSet) Keys() *txn.KeySet {
	var s txn.KeySet
	for i := range ws.Rows {
		r := &ws.Rows[i]
		switch r.Op {
		case OpTruncate:
			s.Add(r.Key, txn.X)
		default:
			if r.Key.Level != 0 { // inserts into tables without a primary key have none
				s.Add(r.Key, txn.X)
			}
			if r.OldKey.Level != 0 {
				s.Add(r.OldKey, txn.X)
			}
			s.Add(r.Table.TableKey(), txn.IX)
			if r.Op != OpDelete {
				uniqueKeys(&s, r)
				referenceKeys(&s, r)
			}
		}
	}
	for i := range ws.LargeObjects {
		s.Add(LargeObjectKey(ws.LargeObjects[i].OID), txn.X)
		s.Add(LargeObjectsTable(), txn.IX)
	}
	return &s
}

// ReplicaIdentitySQL is a statement that sets REPLICA IDENTITY FULL, in
// the current transaction, on every replicated table without a primary
// key whose replica identity is still the default, and that the current
// role acts for. PostgreSQL then logs the whole old row of an update or
// delete, which is how such a row is keyed and found on other nodes
// (Row.OldRow); without it, PostgreSQL refuses those statements on a
// published table. A node runs it at start, and an applier after each
// DDL replay and before the rows after it (event triggers do not fire
// there); at
// the origin the DDL event trigger does the same as the DDL runs. It
// changes only the local WAL format, never data. A table it cannot lock
// at once (a prepared transaction left by a crash holds a lock on it
// until the node resolves it) is left for the next run rather than
// waited for.
const ReplicaIdentitySQL = `DO $ordo$
DECLARE
	r record;
	saved text := current_setting('lock_timeout');
BEGIN
	PERFORM set_config('lock_timeout', '100ms', true);
	FOR r IN
		SELECT c.oid::regclass AS tbl
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence = 'p' AND c.relreplident = 'd'
			AND n.nspname NOT IN ('pg_catalog', 'information_schema', '_ordo') AND n.nspname NOT LIKE 'pg\_%'
			AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
			AND pg_has_role(c.relowner, 'USAGE')
	LOOP
		BEGIN
			EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', r.tbl);
		EXCEPTION WHEN lock_not_available THEN
			NULL;
		END;
	END LOOP;
	PERFORM set_config('lock_timeout', saved, true);
END
$ordo$`

// Notification is one NOTIFY of a transaction.
type Notification struct {
	Channel, Payload string
}
