package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordo-db/ordo/internal/txn"
)

// ErrAwaitTimeout is returned by Capture.Await when the write set of the
// prepared transaction was not decoded within Config.AwaitTimeout.
var ErrAwaitTimeout = errors.New("capture: timed out waiting for the decoded write set")

// ErrStopped is returned by Capture.Await once Stop was called.
var ErrStopped = errors.New("capture: stopped")

// ErrEnded is returned by Await for a prepared transaction whose COMMIT
// PREPARED or ROLLBACK PREPARED was decoded before anyone claimed its
// write set (the node rolls back prepared transactions that block an
// apply, even one whose session is about to claim it).
var ErrEnded = errors.New("capture: the prepared transaction ended before its write set was claimed")

// ErrBadName is returned by Setup and Start for a slot or publication name
// that is not a plain lowercase identifier.
var ErrBadName = errors.New("capture: bad slot or publication name")

// DefaultPublication is the publication a node publishes every table in.
const DefaultPublication = "ordo"

// Config configures a Capture.
type Config struct {
	// DSN is an ordinary connection string of the node's PostgreSQL, for a
	// role allowed to replicate (Ordo uses the superuser). The capture adds
	// replication=database itself.
	DSN string
	// Slot is the logical replication slot name (default "ordo_capture").
	Slot string
	// Publication is the publication name (default DefaultPublication).
	Publication string
	// Limits bound one write set.
	Limits Limits
	// AwaitTimeout: Await gives up once the stream has received nothing
	// from PostgreSQL for this long (default 10s); a large write set that
	// keeps arriving is waited for, up to AwaitLimit (default 10 min).
	AwaitTimeout time.Duration
	AwaitLimit   time.Duration
	// StatusInterval is the period of standby status updates (default 1s).
	StatusInterval time.Duration
	// MaxUnclaimed bounds the decoded write sets kept for an Await that has
	// not come yet (default 10000); the oldest is dropped beyond it.
	MaxUnclaimed int
	// Logger receives the leak warnings and stream errors (default
	// slog.Default()).
	Logger *slog.Logger
	// Registerer receives the capture's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

func (c *Config) defaults() error {
	if c.Slot == "" {
		c.Slot = "ordo_capture"
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	for _, n := range []string{c.Slot, c.Publication} {
		if !nameRE.MatchString(n) {
			return fmt.Errorf("%w: %q (want [a-z_][a-z0-9_]*, at most 63 bytes)", ErrBadName, n)
		}
	}
	if c.AwaitTimeout <= 0 {
		c.AwaitTimeout = 10 * time.Second
	}
	if c.AwaitLimit <= 0 {
		c.AwaitLimit = 10 * time.Minute
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.MaxUnclaimed <= 0 {
		c.MaxUnclaimed = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Capture streams the node's slot and hands out the write sets of prepared
// transactions. Create it with Start; stop it with Stop.
type Capture struct {
	cfg     Config
	metrics *metrics
	cancel  context.CancelFunc
	done    chan struct{}

	// received is when the stream last received a message (UnixNano).
	received atomic.Int64

	mu        sync.Mutex
	waits     map[txn.GID]*waiter
	unclaimed []txn.GID // decoded, not awaited yet, oldest first
	// ended are decoded write sets dropped unclaimed because their
	// transaction ended (how: "committed" or "rolled back"), for an
	// Await that comes after; endedOrder bounds them, oldest first.
	ended      map[txn.GID]string
	endedOrder []txn.GID
	stopped    bool
}

type waiter struct {
	done    chan struct{}
	ws      *WriteSet
	err     error
	decoded bool
}

// Setup creates the publication (FOR ALL TABLES) and the two-phase logical
// slot if they do not exist; it checks an existing slot is a pgoutput slot
// with two_phase on. It is idempotent.
func Setup(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return fmt.Errorf("capture: setup: %w", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = $1", cfg.Publication).Scan(&n); err != nil {
		return fmt.Errorf("capture: setup: %w", err)
	}
	if n == 0 {
		if _, err := conn.Exec(ctx, "CREATE PUBLICATION "+cfg.Publication+" FOR ALL TABLES"); err != nil {
			return fmt.Errorf("capture: create publication %s: %w", cfg.Publication, err)
		}
	}
	var plugin string
	var twoPhase bool
	err = conn.QueryRow(ctx, "SELECT plugin, two_phase FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&plugin, &twoPhase)
	switch {
	case err == nil:
		if plugin != "pgoutput" || !twoPhase {
			return fmt.Errorf("capture: slot %s exists with plugin %q two_phase=%v; want pgoutput with two_phase", cfg.Slot, plugin, twoPhase)
		}
		return nil
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("capture: setup: %w", err)
	}
	rc, err := replicationConn(ctx, cfg.DSN)
	if err != nil {
		return err
	}
	defer rc.Close(context.Background())
	sql := "CREATE_REPLICATION_SLOT " + cfg.Slot + " LOGICAL pgoutput (SNAPSHOT 'nothing', TWO_PHASE true)"
	if _, err := rc.Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("capture: create slot %s: %w", cfg.Slot, err)
	}
	return nil
}

// replicationConn opens a logical replication connection. The session
// settings fix the text output of values (ISO dates, UTC, exact floats,
// hex bytea), so what is decoded reads back identically on any node.
func replicationConn(ctx context.Context, dsn string) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	pc.RuntimeParams["replication"] = "database"
	for k, v := range outputSettings {
		pc.RuntimeParams[k] = v
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("capture: replication connection: %w", err)
	}
	return conn, nil
}

// OriginFilterVersion is the first PostgreSQL version (16) whose pgoutput
// takes the origin option: from it on, the stream asks for changes with no
// replication origin only, and applies, which run under one, are never
// decoded.
const OriginFilterVersion = 160000

// outputSettings are the session settings of the replication connection.
var outputSettings = map[string]string{
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"TimeZone":           "UTC",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
}

// Start runs Setup and starts streaming the slot in a goroutine that
// reconnects (with backoff) after errors until Stop.
func Start(ctx context.Context, cfg Config) (*Capture, error) {
	if err := Setup(ctx, cfg); err != nil {
		return nil, err
	}
	_ = cfg.defaults()
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Capture{
		cfg:     cfg,
		metrics: newMetrics(cfg.Registerer),
		cancel:  cancel,
		done:    make(chan struct{}),
		waits:   make(map[txn.GID]*waiter),
		ended:   make(map[txn.GID]string),
	}
	ready := make(chan error, 1)
	go c.run(runCtx, ready)
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			<-c.done
			return nil, err
		}
	case <-ctx.Done():
		cancel()
		<-c.done
		return nil, ctx.Err()
	}
	return c, nil
}

// Stop ends streaming, waits for the goroutine and fails pending Awaits
// with ErrStopped.
func (c *Capture) Stop() {
	c.cancel()
	<-c.done
	c.mu.Lock()
	c.stopped = true
	for _, w := range c.waits {
		if !w.decoded {
			w.err = ErrStopped
			close(w.done)
			w.decoded = true
		}
	}
	c.mu.Unlock()
}

// Await returns the write set of the prepared transaction gid once its
// PREPARE has been decoded. Call it after PREPARE TRANSACTION returned (it
// also works if the PREPARE was decoded before Await is called). It waits
// at most Config.AwaitTimeout, then returns an error wrapping
// ErrAwaitTimeout; a write set over the limits or touching a table without
// a primary key yields an error wrapping ErrTooLarge or ErrNoPrimaryKey.
// Each decoded write set is handed out once.
func (c *Capture) Await(ctx context.Context, gid txn.GID) (*WriteSet, error) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil, ErrStopped
	}
	if how, ok := c.ended[gid]; ok {
		delete(c.ended, gid)
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: gid %s was %s", ErrEnded, gid, how)
	}
	w := c.waiterLocked(gid)
	c.mu.Unlock()
	began := time.Now()
	t := time.NewTimer(c.cfg.AwaitTimeout)
	defer t.Stop()
	var err error
wait:
	for {
		select {
		case <-w.done:
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-t.C:
			idle := time.Since(time.Unix(0, c.received.Load()))
			waited := time.Since(began)
			if idle < c.cfg.AwaitTimeout && waited < c.cfg.AwaitLimit {
				t.Reset(min(c.cfg.AwaitTimeout-idle, c.cfg.AwaitLimit-waited))
				continue
			}
			err = fmt.Errorf("%w: gid %s after %s (the stream's last message: %s ago)", ErrAwaitTimeout, gid, waited.Round(time.Millisecond), idle.Round(time.Millisecond))
			break wait
		}
	}
	c.mu.Lock()
	if c.waits[gid] == w {
		delete(c.waits, gid)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return w.ws, w.err
}

func (c *Capture) waiterLocked(gid txn.GID) *waiter {
	w, ok := c.waits[gid]
	if !ok {
		w = &waiter{done: make(chan struct{})}
		c.waits[gid] = w
	}
	return w
}

// deliver hands a decoded prepared transaction to its waiter.
func (c *Capture) deliver(p Prepared) {
	gid := p.WriteSet.GID
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiterLocked(gid)
	if w.decoded { // a resent PREPARE after a stream restart: keep the first
		return
	}
	w.ws, w.err, w.decoded = p.WriteSet, p.Err, true
	close(w.done)
	c.unclaimed = append(c.unclaimed, gid)
	for len(c.unclaimed) > c.cfg.MaxUnclaimed {
		old := c.unclaimed[0]
		c.unclaimed = c.unclaimed[1:]
		if ow, ok := c.waits[old]; ok && ow.decoded {
			delete(c.waits, old)
		}
	}
}

// forget drops an unclaimed write set once its outcome (how) is decoded,
// and remembers that it ended: an Await that comes after it fails at once
// (ErrEnded) instead of waiting for a PREPARE that was decoded already.
func (c *Capture) forget(gid, how string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w, ok := c.waits[txn.GID(gid)]; ok && w.decoded {
		delete(c.waits, txn.GID(gid))
		c.ended[txn.GID(gid)] = how
		c.endedOrder = append(c.endedOrder, txn.GID(gid))
		for len(c.endedOrder) > c.cfg.MaxUnclaimed {
			delete(c.ended, c.endedOrder[0])
			c.endedOrder = c.endedOrder[1:]
		}
	}
	if len(c.unclaimed) > 0 && c.unclaimed[0] == txn.GID(gid) {
		c.unclaimed = c.unclaimed[1:]
	}
}

// run streams until runCtx is cancelled, reconnecting after errors. The
// first connection's outcome is reported on ready.
func (c *Capture) run(ctx context.Context, ready chan<- error) {
	defer close(c.done)
	backoff := 100 * time.Millisecond
	first := true
	began := time.Now()
	for ctx.Err() == nil {
		err := c.stream(ctx, func() {
			if first {
				first = false
				ready <- nil
			}
			backoff = 100 * time.Millisecond
		})
		if ctx.Err() != nil {
			break
		}
		if first && slotInUse(err) && time.Since(began) < slotBusyWait {
			// The walsender of a connection that just ended (Setup's,
			// or the stream of a node that stopped a moment ago) lets
			// the slot go when its process exits, a little after.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if first {
			ready <- err
			return
		}
		c.metrics.restarts.Inc()
		c.cfg.Logger.Warn("capture: stream failed; reconnecting", "slot", c.cfg.Slot, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	if first {
		ready <- ctx.Err()
	}
}

// slotBusyWait is how long Start waits for a slot another connection
// still has active before it fails.
var slotBusyWait = 10 * time.Second

// slotInUse reports whether err is PostgreSQL's refusal of a slot another
// connection has active (55006).
func slotInUse(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55006"
}

// stream runs one replication connection: START_REPLICATION, then decode
// every XLogData and answer keepalives, sending standby status updates.
func (c *Capture) stream(ctx context.Context, started func()) error {
	cat, err := pgx.Connect(ctx, c.cfg.DSN)
	if err != nil {
		return fmt.Errorf("capture: catalog connection: %w", err)
	}
	defer cat.Close(context.Background())
	rc, err := replicationConn(ctx, c.cfg.DSN)
	if err != nil {
		return err
	}
	defer rc.Close(context.Background())
	args := []string{"proto_version '3'", "two_phase 'on'", "messages 'true'", "publication_names '" + c.cfg.Publication + "'"}
	var version int
	if err := cat.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return fmt.Errorf("capture: server version: %w", err)
	}
	if version >= OriginFilterVersion {
		// Applies run under a replication origin (package apply), so the
		// walsender leaves them out instead of decoding and sending rows
		// this stream would only recognise and drop.
		args = append(args, "origin 'none'")
	}
	if err := pglogrepl.StartReplication(ctx, rc, c.cfg.Slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return fmt.Errorf("capture: start replication on slot %s: %w", c.cfg.Slot, err)
	}
	started()
	dec := NewDecoder(c.cfg.Limits, func(rel *RelationMsg) ([]string, error) { return primaryKey(ctx, cat, rel.RelID) })
	dec.Uniques = func(rel *RelationMsg) ([]UniqueIndex, error) { return uniqueIndexes(ctx, cat, rel.RelID) }
	dec.ForeignKeys = func(rel *RelationMsg) ([]ForeignKeyDesc, error) { return foreignKeys(ctx, cat, rel.RelID) }
	var confirmed pglogrepl.LSN
	next := time.Now().Add(c.cfg.StatusInterval)
	for {
		if !time.Now().Before(next) {
			err := pglogrepl.SendStandbyStatusUpdate(ctx, rc, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: confirmed, WALFlushPosition: confirmed, WALApplyPosition: confirmed})
			if err != nil {
				return fmt.Errorf("capture: standby status: %w", err)
			}
			next = time.Now().Add(c.cfg.StatusInterval)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := rc.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("capture: receive: %w", err)
		}
		c.received.Store(time.Now().UnixNano())
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("capture: keepalive: %w", err)
				}
				if !dec.InTransaction() && ka.ServerWALEnd > confirmed {
					confirmed = ka.ServerWALEnd
				}
				if ka.ReplyRequested {
					next = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("capture: xlogdata: %w", err)
				}
				m, err := Decode(xld.WALData)
				if err != nil {
					return fmt.Errorf("capture: at %s: %w", xld.WALStart, err)
				}
				ev, err := dec.Handle(m)
				if err != nil {
					return fmt.Errorf("capture: at %s: %w", xld.WALStart, err)
				}
				if end := c.handle(ev); end > uint64(confirmed) {
					confirmed = pglogrepl.LSN(end)
				}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("capture: stream: %w", pgconn.ErrorResponseToPgError(msg))
		}
	}
}

// handle acts on a decoder event and returns the WAL position up to which
// the stream may be confirmed (0 if none).
func (c *Capture) handle(ev Event) uint64 {
	switch ev := ev.(type) {
	case Prepared:
		c.metrics.prepared.Inc()
		if ev.Err != nil {
			c.metrics.refused.Inc()
		}
		c.deliver(ev)
		return ev.WriteSet.EndLSN
	case CommitPrepared:
		if _, _, err := txn.ParseGID(ev.GID); err != nil {
			c.leak(ev.XID, -1, "commit prepared "+ev.GID)
		}
		c.forget(ev.GID, "committed")
		return ev.EndLSN
	case RollbackPrepared:
		c.forget(ev.GID, "rolled back")
		return ev.EndLSN
	case Committed:
		if ev.Apply {
			c.metrics.applies.Inc()
		} else if ev.Rows > 0 { // none: Ordo's own bookkeeping
			c.leak(ev.XID, ev.Rows, "commit")
		}
		return ev.EndLSN
	}
	return 0
}

func (c *Capture) leak(xid uint32, rows int, what string) {
	c.metrics.unreplicated.Inc()
	c.cfg.Logger.Warn("capture: unreplicated local commit (a write bypassed Ordo)", "xid", xid, "rows", rows, "what", what)
}

// uniqueIndexes returns the unique indexes of relid other than its primary
// key, key columns in index order (INCLUDE columns are not part of the
// uniqueness). Invalid indexes count when ready: one left behind by a
// failed CREATE INDEX CONCURRENTLY still enforces uniqueness.
func uniqueIndexes(ctx context.Context, conn *pgx.Conn, relid uint32) ([]UniqueIndex, error) {
	rows, err := conn.Query(ctx, `
		SELECT c.relname, i.indnullsnotdistinct,
		  i.indexprs IS NOT NULL OR i.indpred IS NOT NULL,
		  ARRAY(SELECT a.attname FROM unnest(i.indkey[0:i.indnkeyatts-1]) WITH ORDINALITY AS k(attnum, ord)
		        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		        ORDER BY k.ord)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1 AND i.indisunique AND NOT i.indisprimary AND i.indisready
		ORDER BY c.relname`, relid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (UniqueIndex, error) {
		var u UniqueIndex
		err := row.Scan(&u.Name, &u.NullsNotDistinct, &u.Opaque, &u.Columns)
		return u, err
	})
}

// foreignKeys returns the foreign keys of relid: the parent, and the child
// columns ordered as the parent's primary key columns they reference (when
// they reference the primary key).
func foreignKeys(ctx context.Context, conn *pgx.Conn, relid uint32) ([]ForeignKeyDesc, error) {
	rows, err := conn.Query(ctx, `
		SELECT pn.nspname, pc.relname,
		  ARRAY(SELECT a.attname FROM unnest(con.conkey, con.confkey) AS k(ch, pa)
		        JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.ch
		        ORDER BY array_position(pk.indkey::int2[], k.pa)),
		  coalesce((SELECT array_agg(x ORDER BY x) FROM unnest(con.confkey) x) =
		           (SELECT array_agg(x ORDER BY x) FROM unnest(pk.indkey::int2[]) x), false)
		FROM pg_constraint con
		JOIN pg_class pc ON pc.oid = con.confrelid
		JOIN pg_namespace pn ON pn.oid = pc.relnamespace
		LEFT JOIN pg_index pk ON pk.indrelid = con.confrelid AND pk.indisprimary
		WHERE con.conrelid = $1 AND con.contype = 'f'
		ORDER BY con.conname`, relid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ForeignKeyDesc, error) {
		var f ForeignKeyDesc
		err := row.Scan(&f.ParentSchema, &f.ParentTable, &f.Columns, &f.ToPrimaryKey)
		return f, err
	})
}

// primaryKey returns the primary key column names of relid in key order.
func primaryKey(ctx context.Context, conn *pgx.Conn, relid uint32) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY k.ord`, relid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
