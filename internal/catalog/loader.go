package catalog

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Loader loads one database's catalog for a Cache over a connection it
// keeps, and reads the system schemas (pg_catalog, information_schema:
// most of a catalog's rows, and nearly all of a small database's) again
// only when objects are created in them. A node refreshes its catalog
// after every DDL it commits or applies, while its other commits wait
// (replica.Config.OnDDL), so a refresh must cost what the user's schema
// costs, not a connection and the whole of pg_proc.
type Loader struct {
	connect      func(ctx context.Context) (*pgx.Conn, error)
	granules     map[string]string
	granuleSeqno uint64

	mu     sync.Mutex
	conn   *pgx.Conn
	system *Description
	sig    [2]int64
	// systemLoads counts the loads of the system schemas (tests).
	systemLoads int
}

// NewLoader returns a Loader that opens its connection with connect when
// it has none (first, and after an error) and gives the tables granules
// (see Load).
func NewLoader(connect func(ctx context.Context) (*pgx.Conn, error), granules map[string]string) *Loader {
	return &Loader{connect: connect, granules: granules}
}

// SetGranules sets the granule columns (from the cluster's split conflict
// classes) and their epoch for the loads after it. A column is given to a
// table only if it exists and is part of its primary key (or the table
// has none, whose old rows are logged whole): the granule of a row then
// never changes unseen by its key or old row.
func (l *Loader) SetGranules(granules map[string]string, seqno uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.granules, l.granuleSeqno = granules, seqno
}

// usableGranules returns the granules of l for the tables of user that
// can have them (SetGranules).
func (l *Loader) usableGranules(user []TableDesc) map[string]string {
	if len(l.granules) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, t := range user {
		name := t.Schema + "." + t.Name
		col, ok := l.granules[name]
		if !ok || !slices.ContainsFunc(t.Columns, func(c Column) bool { return c.Name == col }) {
			continue
		}
		if len(t.PK) == 0 || slices.Contains(t.PK, col) {
			out[name] = col
		}
	}
	return out
}

// Load reads the catalog as Load does: the user's schemas always, the
// system schemas when they changed. It is a Cache's load function.
func (l *Loader) Load(ctx context.Context) (Description, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.conn != nil && !l.conn.IsClosed()
	d, err := l.loadLocked(ctx)
	if err != nil {
		l.closeLocked() // a connection in an unknown state is not reused
		if kept && ctx.Err() == nil {
			// The kept connection may have died since (PostgreSQL
			// restarted, an idle timeout): once more on a new one, as
			// a refresh after DDL is not tried again.
			if d, err = l.loadLocked(ctx); err != nil {
				l.closeLocked()
			}
		}
	}
	return d, err
}

func (l *Loader) loadLocked(ctx context.Context) (Description, error) {
	if l.conn == nil || l.conn.IsClosed() {
		c, err := l.connect(ctx)
		if err != nil {
			return Description{}, fmt.Errorf("catalog: load: %w", err)
		}
		l.conn = c
	}
	var sig [2]int64
	if err := l.conn.QueryRow(ctx, scoped(qSystemSignature, systemSchemas)).Scan(&sig[0], &sig[1]); err != nil {
		return Description{}, fmt.Errorf("catalog: load: %w", err)
	}
	if l.system == nil || sig != l.sig {
		sys, err := load(ctx, l.conn, nil, systemSchemas)
		if err != nil {
			return Description{}, err
		}
		l.system, l.sig = &sys, sig
		l.systemLoads++
	}
	user, err := load(ctx, l.conn, nil, userSchemas)
	if err != nil {
		return Description{}, err
	}
	return Description{
		Tables:       slices.Concat(l.system.Tables, user.Tables),
		Views:        slices.Concat(l.system.Views, user.Views),
		Functions:    slices.Concat(l.system.Functions, user.Functions),
		Operators:    slices.Concat(l.system.Operators, user.Operators),
		ReadingTypes: slices.Concat(l.system.ReadingTypes, user.ReadingTypes),
		Granules:     l.usableGranules(user.Tables),
		GranuleSeqno: l.granuleSeqno,
	}, nil
}

// Close closes the kept connection; a later Load opens another.
func (l *Loader) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked()
}

func (l *Loader) closeLocked() {
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.conn.Close(ctx)
		l.conn = nil
	}
}
