package capture

import (
	"errors"
	"fmt"

	"github.com/ordo-db/ordo/internal/txn"
)

// OrdoSchema is the schema of Ordo's own bookkeeping tables. Rows of its
// bookkeeping tables (Bookkeeping) are never part of a write set; an insert
// into _ordo.applied marks a transaction as an apply of a decided remote
// write set (package apply writes that row in the same transaction as the
// applied rows). The leading underscore keeps it out of any role's "$user"
// search_path entry.
const OrdoSchema = "_ordo"

// AppliedTable is the table, in OrdoSchema, whose inserts mark applies.
const AppliedTable = "applied"

// Bookkeeping reports whether schema.table is one of Ordo's node-local
// bookkeeping tables (every table of OrdoSchema: proof rows, early
// rollbacks), never replicated; a transaction that writes one is Ordo's
// own, never a leak.
func Bookkeeping(schema, table string) bool {
	return schema == OrdoSchema
}

// ErrTooLarge is returned (through Capture.Await) for a prepared
// transaction whose write set exceeds Limits.MaxRows or Limits.MaxBytes.
var ErrTooLarge = errors.New("capture: write set too large")

// ErrNoPrimaryKey is returned (through Capture.Await) for a prepared
// transaction that updated or deleted rows of a table without a primary
// key whose replica identity is not FULL: PostgreSQL sent no old row, so
// the row can be neither certified nor found on apply. (Ordo sets
// REPLICA IDENTITY FULL on such tables: ReplicaIdentitySQL.)
var ErrNoPrimaryKey = errors.New("capture: table has no primary key")

// ErrProtocol is returned by Decoder.Handle for a message sequence
// pgoutput does not produce (a row change outside a transaction, an
// unknown relation, nested transactions).
var ErrProtocol = errors.New("capture: unexpected pgoutput message sequence")

// Limits bound the size of one write set.
type Limits struct {
	MaxRows  int   // rows (truncated tables count as rows); 0 = DefaultMaxRows
	MaxBytes int64 // bytes as counted in WriteSet.Bytes; 0 = DefaultMaxBytes
}

// Default limits: a 100,000-row transaction of small rows fits easily.
const (
	DefaultMaxRows  = 1_000_000
	DefaultMaxBytes = 512 << 20
)

// rowOverhead is the fixed size counted per row against MaxBytes.
const rowOverhead = 64

// Event is what Decoder.Handle reports at the end of a transaction: one of
// Prepared, CommitPrepared, RollbackPrepared, Committed.
type Event interface{ event() }

// Prepared reports that a prepared transaction was fully decoded. Err is
// set (wrapping ErrTooLarge or ErrNoPrimaryKey) when no usable write set
// could be built; WriteSet then holds no rows.
type Prepared struct {
	WriteSet *WriteSet
	Err      error
}

// CommitPrepared reports a decoded COMMIT PREPARED.
type CommitPrepared struct {
	GID    string
	XID    uint32
	EndLSN uint64
}

// RollbackPrepared reports a decoded ROLLBACK PREPARED.
type RollbackPrepared struct {
	GID    string
	XID    uint32
	EndLSN uint64
}

// Committed reports a plain (not prepared) commit of a transaction that
// wrote replicated tables. Apply is true when it wrote a row of
// _ordo.applied, i.e. it is an apply of a decided write set; otherwise, if
// it wrote rows (Rows > 0, bookkeeping rows not counted), it is a write
// that bypassed Ordo (a leak).
type Committed struct {
	XID    uint32
	Apply  bool
	Rows   int
	EndLSN uint64
}

func (Prepared) event()         {}
func (CommitPrepared) event()   {}
func (RollbackPrepared) event() {}
func (Committed) event()        {}

// KeyOrderFunc returns the primary key column names of a relation, in key
// order, or nil if it has none. Decoder uses it, when set, to order key
// values as the primary key index does rather than by column position.
type KeyOrderFunc func(rel *RelationMsg) ([]string, error)

// Decoder turns a sequence of pgoutput messages into write sets and
// transaction events. It owns the relation cache. It does no I/O except
// through KeyOrder and is not safe for concurrent use: one goroutine (the
// Capture's stream reader) feeds it.
type Decoder struct {
	limits   Limits
	keyOrder KeyOrderFunc
	// Uniques, if set, returns the unique indexes (other than the primary
	// key) of a relation, with column names.
	Uniques func(rel *RelationMsg) ([]UniqueIndex, error)
	// ForeignKeys, if set, returns the foreign keys of a relation.
	ForeignKeys func(rel *RelationMsg) ([]ForeignKeyDesc, error)
	rels        map[uint32]*Table
	cur         *pending
}

type pending struct {
	prepared  bool
	xid       uint32
	ws        *WriteSet // prepared only
	err       error
	apply     bool
	rows      int
	truncates int
}

// NewDecoder returns a decoder with the given limits; keyOrder may be nil.
func NewDecoder(limits Limits, keyOrder KeyOrderFunc) *Decoder {
	if limits.MaxRows <= 0 {
		limits.MaxRows = DefaultMaxRows
	}
	if limits.MaxBytes <= 0 {
		limits.MaxBytes = DefaultMaxBytes
	}
	return &Decoder{limits: limits, keyOrder: keyOrder, rels: make(map[uint32]*Table)}
}

// InTransaction reports whether a transaction is being decoded (the stream
// position is inside it, so it must not be confirmed as flushed).
func (d *Decoder) InTransaction() bool { return d.cur != nil }

// Reset forgets a partially decoded transaction (after the stream was
// restarted, the server sends it again from its beginning). The relation
// cache is kept: the server resends relations before use on a new stream.
func (d *Decoder) Reset() { d.cur = nil }

// Handle feeds one message. It returns an event when the message ends a
// transaction (or is a COMMIT/ROLLBACK PREPARED), nil otherwise.
func (d *Decoder) Handle(m Message) (Event, error) {
	switch m := m.(type) {
	case *BeginMsg:
		if d.cur != nil {
			return nil, fmt.Errorf("%w: begin of xid %d inside xid %d", ErrProtocol, m.XID, d.cur.xid)
		}
		d.cur = &pending{xid: m.XID}
	case *BeginPrepareMsg:
		if d.cur != nil {
			return nil, fmt.Errorf("%w: begin prepare of xid %d inside xid %d", ErrProtocol, m.XID, d.cur.xid)
		}
		d.cur = &pending{prepared: true, xid: m.XID, ws: &WriteSet{GID: txn.GID(m.GID), XID: m.XID}}
	case *CommitMsg:
		p := d.cur
		if p == nil || p.prepared {
			return nil, fmt.Errorf("%w: commit outside a plain transaction", ErrProtocol)
		}
		d.cur = nil
		return Committed{XID: p.xid, Apply: p.apply, Rows: p.rows, EndLSN: m.EndLSN}, nil
	case *PrepareMsg:
		p := d.cur
		if p == nil || !p.prepared || string(p.ws.GID) != m.GID {
			return nil, fmt.Errorf("%w: prepare %q outside its begin prepare", ErrProtocol, m.GID)
		}
		d.cur = nil
		p.ws.PrepareLSN, p.ws.EndLSN = m.PrepareLSN, m.EndLSN
		if p.err != nil {
			p.ws.Rows = nil
		}
		return Prepared{WriteSet: p.ws, Err: p.err}, nil
	case *CommitPreparedMsg:
		if d.cur != nil {
			return nil, fmt.Errorf("%w: commit prepared inside xid %d", ErrProtocol, d.cur.xid)
		}
		return CommitPrepared{GID: m.GID, XID: m.XID, EndLSN: m.EndLSN}, nil
	case *RollbackPreparedMsg:
		if d.cur != nil {
			return nil, fmt.Errorf("%w: rollback prepared inside xid %d", ErrProtocol, d.cur.xid)
		}
		return RollbackPrepared{GID: m.GID, XID: m.XID, EndLSN: m.RollbackEndLSN}, nil
	case *RelationMsg:
		t, err := d.table(m)
		if err != nil {
			return nil, err
		}
		d.rels[m.RelID] = t
	case *InsertMsg:
		return nil, d.change(m.RelID, func(t *Table) (Row, error) { return insertRow(t, m) })
	case *UpdateMsg:
		return nil, d.change(m.RelID, func(t *Table) (Row, error) { return updateRow(t, m) })
	case *DeleteMsg:
		return nil, d.change(m.RelID, func(t *Table) (Row, error) { return deleteRow(t, m) })
	case *TruncateMsg:
		return nil, d.truncate(m)
	case *LogicalMsg:
		return nil, d.message(m)
	case *TypeMsg, *OriginMsg:
		// Types are described by name only; Ordo does not use origins.
	default:
		return nil, fmt.Errorf("%w: %T", ErrProtocol, m)
	}
	return nil, nil
}

// table builds the cached description of a relation.
func (d *Decoder) table(m *RelationMsg) (*Table, error) {
	ns := m.Namespace
	if ns == "" {
		ns = "pg_catalog"
	}
	t := &Table{Schema: ns, Name: m.Name, Columns: make([]Column, len(m.Columns))}
	byName := make(map[string]int, len(m.Columns))
	for i, c := range m.Columns {
		t.Columns[i] = Column{Name: c.Name, TypeOID: c.TypeOID}
		byName[c.Name] = i
	}
	var keyNames []string
	if d.keyOrder != nil {
		names, err := d.keyOrder(m)
		if err != nil {
			return nil, fmt.Errorf("capture: primary key of %s.%s: %w", ns, m.Name, err)
		}
		keyNames = names
		for _, n := range names {
			if _, ok := byName[n]; !ok {
				return nil, fmt.Errorf("capture: primary key column %q of %s.%s not published", n, ns, m.Name)
			}
		}
	}
	if len(keyNames) == 0 && m.ReplicaIdentity == 'd' {
		// No catalog answer (no lookup configured, or a table created by
		// the very transaction being decoded, which the catalog cannot see
		// yet): the relation message flags the primary key columns.
		for _, c := range m.Columns {
			if c.Flags&1 != 0 {
				keyNames = append(keyNames, c.Name)
			}
		}
	}
	for _, n := range keyNames {
		i := byName[n]
		t.Columns[i].Key = true
		t.KeyColumns = append(t.KeyColumns, i)
	}
	if d.Uniques != nil {
		us, err := d.Uniques(m)
		if err != nil {
			return nil, fmt.Errorf("capture: unique indexes of %s.%s: %w", ns, m.Name, err)
		}
		for _, u := range us {
			cu := Unique{Name: u.Name, NullsNotDistinct: u.NullsNotDistinct, Opaque: u.Opaque}
			for _, c := range u.Columns {
				i, ok := byName[c]
				if !ok {
					cu.Opaque = true // a column not published: cannot compute the values
					break
				}
				cu.Columns = append(cu.Columns, i)
			}
			if cu.Opaque {
				cu.Columns = nil
			}
			t.Uniques = append(t.Uniques, cu)
		}
	}
	if d.ForeignKeys != nil {
		fks, err := d.ForeignKeys(m)
		if err != nil {
			return nil, fmt.Errorf("capture: foreign keys of %s.%s: %w", ns, m.Name, err)
		}
		for _, f := range fks {
			fk := ForeignKey{ParentSchema: f.ParentSchema, ParentTable: f.ParentTable, ToPrimaryKey: f.ToPrimaryKey}
			for _, c := range f.Columns {
				i, ok := byName[c]
				if !ok {
					fk.ToPrimaryKey = false // a column not published
					break
				}
				fk.Columns = append(fk.Columns, i)
			}
			if !fk.ToPrimaryKey {
				fk.Columns = nil
			}
			t.ForeignKeys = append(t.ForeignKeys, fk)
		}
	}
	return t, nil
}

// ForeignKeyDesc describes a foreign key as the catalog has it: the child
// columns in the order of the parent's primary key columns they reference.
type ForeignKeyDesc struct {
	ParentSchema, ParentTable string
	Columns                   []string
	ToPrimaryKey              bool
}

// UniqueIndex describes a unique index as the catalog has it.
type UniqueIndex struct {
	Name             string
	Columns          []string
	NullsNotDistinct bool
	Opaque           bool // expression or partial index
}

// change adds one row change to the current transaction. Inserts into a
// table without a primary key are accepted (an insert needs no key to be
// applied, and inserts never conflict with each other: such a row carries
// no row key, only IX on its table); updates and deletes of such tables
// carry the whole old row (REPLICA IDENTITY FULL) and are keyed by it
// (FullRowKey), or, without it, fail the transaction's write set.
func (d *Decoder) change(relID uint32, build func(*Table) (Row, error)) error {
	p := d.cur
	if p == nil {
		return fmt.Errorf("%w: row change outside a transaction", ErrProtocol)
	}
	t, ok := d.rels[relID]
	if !ok {
		return fmt.Errorf("%w: row change of unknown relation %d", ErrProtocol, relID)
	}
	if Bookkeeping(t.Schema, t.Name) {
		p.apply = p.apply || t.Name == AppliedTable
		return nil
	}
	p.rows++
	if !p.prepared || p.err != nil {
		return nil
	}
	r, err := build(t)
	if errors.Is(err, ErrNoPrimaryKey) {
		p.fail(fmt.Errorf("%w: %s (gid %s); Ordo replicates updates and deletes of a table without a primary key when its REPLICA IDENTITY is FULL (Ordo sets it when such a table is created; ALTER TABLE … REPLICA IDENTITY FULL, or add a primary key)", ErrNoPrimaryKey, t, p.ws.GID))
		return nil
	}
	if err != nil {
		return err
	}
	d.add(p, r)
	return nil
}

// message takes a DDL record (DDLTriggerSQL) of a prepared transaction
// into its write set. Other messages, and records in plain transactions
// (DDL run behind Ordo's back, or Ordo's own bootstrap), are not Ordo's
// business here.
func (d *Decoder) message(m *LogicalMsg) error {
	p := d.cur
	if m.Prefix != DDLMessagePrefix || m.Flags&1 == 0 || p == nil || !p.prepared || p.err != nil {
		return nil
	}
	ws := p.ws
	var prev *DDLRecord
	if n := len(ws.DDLRecords); n > 0 {
		prev = &ws.DDLRecords[n-1]
	}
	r, dropped, err := parseDDLMessage(m.Content, prev)
	if err != nil {
		// Only this transaction's write set is unusable (a client can
		// tamper with the settings the triggers read); the stream goes on.
		p.fail(fmt.Errorf("capture: gid %s: %w", ws.GID, err))
		return nil
	}
	ws.Bytes += int64(len(m.Content))
	if dropped != nil {
		ws.DDLDropped = append(ws.DDLDropped, dropped...)
		return nil
	}
	r.RowsBefore = len(ws.Rows)
	if createsItsTable(r.Tag) {
		// Its record comes at its end, after the rows it wrote (or an
		// event trigger of the user's that fired before Ordo's wrote),
		// which belong after its replay; it goes where the record before
		// it did, before rows of statements run since, which cannot
		// depend on it: it creates what they did not touch.
		r.RowsBefore = 0
		if prev != nil {
			r.RowsBefore = prev.RowsBefore
		}
	}
	ws.DDLRecords = append(ws.DDLRecords, r)
	return nil
}

// createsItsTable reports whether a DDL command with this tag creates
// tables whose rows it, or an event trigger at its end, may write before
// its record: CREATE TABLE AS and SELECT INTO fill the table they create
// (replayed WITH NO DATA, their rows come from the write set), an
// extension's script may fill its tables, and a user's event trigger may
// fill a table CREATE TABLE created.
func createsItsTable(tag string) bool {
	switch tag {
	case "CREATE TABLE", "CREATE TABLE AS", "SELECT INTO", "CREATE EXTENSION":
		return true
	}
	return false
}

// add appends r to the prepared write set, enforcing the limits.
func (d *Decoder) add(p *pending, r Row) {
	ws := p.ws
	ws.Bytes += rowOverhead
	for _, v := range r.Values {
		ws.Bytes += int64(len(v.Text))
	}
	for _, v := range r.OldValues {
		ws.Bytes += int64(len(v))
	}
	for _, v := range r.OldRow {
		ws.Bytes += int64(len(v.Text))
	}
	switch {
	case len(ws.Rows)+1 > d.limits.MaxRows:
		p.fail(fmt.Errorf("%w: gid %s has more than %d rows (limit max_rows)", ErrTooLarge, ws.GID, d.limits.MaxRows))
	case ws.Bytes > d.limits.MaxBytes:
		p.fail(fmt.Errorf("%w: gid %s has more than %d bytes (limit max_bytes)", ErrTooLarge, ws.GID, d.limits.MaxBytes))
	default:
		ws.Rows = append(ws.Rows, r)
	}
}

// fail records the first reason the write set is unusable and drops its
// rows so memory stays bounded while the rest of the transaction streams.
func (p *pending) fail(err error) {
	if p.err == nil {
		p.err = err
	}
	p.ws.Rows = nil
}

func (d *Decoder) truncate(m *TruncateMsg) error {
	p := d.cur
	if p == nil {
		return fmt.Errorf("%w: truncate outside a transaction", ErrProtocol)
	}
	p.truncates++
	for _, id := range m.RelIDs {
		t, ok := d.rels[id]
		if !ok {
			return fmt.Errorf("%w: truncate of unknown relation %d", ErrProtocol, id)
		}
		if Bookkeeping(t.Schema, t.Name) {
			continue
		}
		p.rows++
		if !p.prepared || p.err != nil {
			continue
		}
		d.add(p, Row{Op: OpTruncate, Table: t, Key: t.TableKey(), TruncateGroup: p.truncates,
			Cascade: m.Options&TruncateCascade != 0, RestartIdentity: m.Options&TruncateRestartIdentity != 0})
	}
	return nil
}

// values copies a tuple into Values (one copy of each value's bytes).
func values(t *Table, cols []TupleColumn) ([]Value, error) {
	if len(cols) != len(t.Columns) {
		return nil, fmt.Errorf("%w: %s: tuple of %d columns, relation has %d", ErrProtocol, t, len(cols), len(t.Columns))
	}
	out := make([]Value, len(cols))
	for i, c := range cols {
		switch c.Kind {
		case KindNull:
			out[i].Kind = Null
		case KindUnchanged:
			out[i].Kind = Unchanged
		case KindText:
			out[i] = Value{Kind: Text, Text: string(c.Data)}
		default:
			return nil, fmt.Errorf("%w: %s.%s: binary tuple data was not requested", ErrProtocol, t, t.Columns[i].Name)
		}
	}
	return out, nil
}

// keyOf returns the key values of a tuple, in key order.
func keyOf(t *Table, cols []TupleColumn) ([]string, error) {
	if len(cols) != len(t.Columns) {
		return nil, fmt.Errorf("%w: %s: tuple of %d columns, relation has %d", ErrProtocol, t, len(cols), len(t.Columns))
	}
	out := make([]string, len(t.KeyColumns))
	for i, k := range t.KeyColumns {
		if cols[k].Kind != KindText {
			return nil, fmt.Errorf("%w: %s: key column %s is %q, not a text value", ErrProtocol, t, t.Columns[k].Name, cols[k].Kind)
		}
		out[i] = string(cols[k].Data)
	}
	return out, nil
}

func newKey(t *Table, vals []Value) ([]string, error) {
	out := make([]string, len(t.KeyColumns))
	for i, k := range t.KeyColumns {
		if vals[k].Kind != Text {
			return nil, fmt.Errorf("%w: %s: new key column %s has no value", ErrProtocol, t, t.Columns[k].Name)
		}
		out[i] = vals[k].Text
	}
	return out, nil
}

func insertRow(t *Table, m *InsertMsg) (Row, error) {
	vals, err := values(t, m.New)
	if err != nil {
		return Row{}, err
	}
	if len(t.KeyColumns) == 0 {
		return Row{Op: OpInsert, Table: t, Values: vals}, nil // no row key: see change
	}
	k, err := newKey(t, vals)
	if err != nil {
		return Row{}, err
	}
	return Row{Op: OpInsert, Table: t, Key: txn.RowKey(t.Schema, t.Name, k...), Values: vals}, nil
}

// oldRow returns the whole old row of an update or delete of a table
// without a primary key, or ErrNoPrimaryKey if PostgreSQL did not send it
// (the table's replica identity is not FULL).
func oldRow(t *Table, kind uint8, old []TupleColumn) ([]Value, error) {
	if kind != 'O' {
		return nil, ErrNoPrimaryKey
	}
	vals, err := values(t, old)
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		if v.Kind == Unchanged {
			return nil, fmt.Errorf("%w: %s: column %s of the old row was not sent", ErrProtocol, t, t.Columns[i].Name)
		}
	}
	return vals, nil
}

func updateRow(t *Table, m *UpdateMsg) (Row, error) {
	vals, err := values(t, m.New)
	if err != nil {
		return Row{}, err
	}
	if len(t.KeyColumns) == 0 {
		old, err := oldRow(t, m.OldKind, m.Old)
		if err != nil {
			return Row{}, err
		}
		return Row{Op: OpUpdate, Table: t, Key: FullRowKey(t, old), Values: vals, OldRow: old}, nil
	}
	var old []string
	if m.OldKind != 0 {
		if old, err = keyOf(t, m.Old); err != nil {
			return Row{}, err
		}
		// A key column PostgreSQL left unsent keeps its old value.
		for i, k := range t.KeyColumns {
			if vals[k].Kind == Unchanged {
				vals[k] = Value{Kind: Text, Text: old[i]}
			}
		}
	}
	k, err := newKey(t, vals)
	if err != nil {
		return Row{}, err
	}
	r := Row{Op: OpUpdate, Table: t, Key: txn.RowKey(t.Schema, t.Name, k...), Values: vals}
	if old != nil {
		if ok := txn.RowKey(t.Schema, t.Name, old...); ok != r.Key {
			r.OldKey, r.OldValues = ok, old
		}
	}
	return r, nil
}

func deleteRow(t *Table, m *DeleteMsg) (Row, error) {
	if len(t.KeyColumns) == 0 {
		old, err := oldRow(t, m.OldKind, m.Old)
		if err != nil {
			return Row{}, err
		}
		return Row{Op: OpDelete, Table: t, Key: FullRowKey(t, old), OldRow: old}, nil
	}
	old, err := keyOf(t, m.Old)
	if err != nil {
		return Row{}, err
	}
	return Row{Op: OpDelete, Table: t, Key: txn.RowKey(t.Schema, t.Name, old...), OldValues: old}, nil
}
