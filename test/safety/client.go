package safety

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/test/safety/history"
)

// opTimeout bounds one operation; past it the outcome is indeterminate.
const opTimeout = 30 * time.Second

// client is one process of the history: one connection to one node, opened
// again after it breaks. Nothing is retried: every attempt is an operation.
type client struct {
	process int
	node    int // 0-based
	dsn     string
	rec     *history.Recorder
	conn    *pgx.Conn
	ops     int // operations so far, for labels
	// onConnect, if set, runs on every new connection (a session
	// setting, such as a time zone).
	onConnect string
	// failed, if set, names more errors after which an operation
	// certainly did not commit (a refusal Ordo rolls back, say).
	failed func(error) bool
	// serializable: transactions begin at SERIALIZABLE (Config).
	serializable bool
}

// didNotCommit reports whether an operation that returned err certainly
// did not commit.
func (c *client) didNotCommit(err error) bool {
	return definitelyAborted(err) || (c.failed != nil && c.failed(err))
}

// label names the next operation's update transaction (ordo.txn_label),
// so that the outcome check can answer for it if it ends indeterminate.
// Every run starts a new cluster: process and count make it unique.
func (c *client) label() string {
	c.ops++
	return fmt.Sprintf("safety-p%d-%d", c.process, c.ops)
}

func (c *client) close() {
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.conn.Close(ctx)
		cancel()
		c.conn = nil
	}
}

func (c *client) connect(ctx context.Context) error {
	if c.conn != nil && !c.conn.IsClosed() {
		return nil
	}
	c.close()
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return err
	}
	if c.onConnect != "" {
		if _, err := conn.Exec(ctx, c.onConnect); err != nil {
			conn.Close(ctx)
			return err
		}
	}
	c.conn = conn
	return nil
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// definitelyAborted reports whether a COMMIT (or an autocommit statement)
// that returned err certainly did not commit: a serialization failure or
// deadlock (class 40), or a transaction PostgreSQL had already aborted.
// Everything else at commit time (08007, lost connections, shutdowns,
// timeouts, unknown errors) is indeterminate.
func definitelyAborted(err error) bool {
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return true
	}
	code := sqlstate(err)
	return strings.HasPrefix(code, "40") || code == "25P02" || code == "23505"
}

// errText is an error for the history, with its SQLSTATE.
func errText(err error) string {
	if code := sqlstate(err); code != "" {
		return code + " " + err.Error()
	}
	return err.Error()
}

// txn runs one transaction as one operation: body's statements, then COMMIT.
// An error before COMMIT is a fail (nothing was sent for replication); at
// COMMIT it is a fail only when definitelyAborted says so, else info. body
// returns the value recorded on completion (e.g. what it read).
//
// The transaction is labelled (SET LOCAL ordo.txn_label, right before
// COMMIT, so it comes after whatever body declares first, such as cons'
// classes) for the outcome check after the run.
func (c *client) txn(f string, arg any, body func(ctx context.Context, tx pgx.Tx) (any, error)) (string, any) {
	label := c.label()
	c.rec.Invoke(c.process, c.node+1, f, arg, label)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	done := func(typ string, v any, err error) (string, any) {
		text := ""
		if err != nil {
			text = errText(err)
			if sqlstate(err) == "" || (c.conn != nil && c.conn.IsClosed()) {
				c.close()
			}
		}
		if v == nil {
			v = arg
		}
		c.rec.Record(typ, c.process, c.node+1, f, v, text)
		return typ, v
	}
	if err := c.connect(ctx); err != nil {
		return done(history.Fail, nil, err)
	}
	var opts pgx.TxOptions
	if c.serializable {
		opts.IsoLevel = pgx.Serializable
	}
	tx, err := c.conn.BeginTx(ctx, opts)
	if err != nil {
		return done(history.Fail, nil, err)
	}
	v, err := body(ctx, tx)
	if err == nil {
		_, err = tx.Exec(ctx, "SET LOCAL ordo.txn_label = '"+label+"'")
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return done(history.Fail, nil, err)
	}
	if err := tx.Commit(ctx); err != nil {
		if c.didNotCommit(err) {
			return done(history.Fail, nil, err)
		}
		return done(history.Info, nil, err)
	}
	return done(history.OK, v, nil)
}

// exec runs one autocommit statement as one operation.
func (c *client) exec(f string, arg any, sql string, args ...any) string {
	typ, _ := c.txnless(f, arg, sql, args...)
	return typ
}

// txnless runs one autocommit statement, labelled (SET ordo.txn_label
// before it) for the outcome check after the run.
func (c *client) txnless(f string, arg any, sql string, args ...any) (string, error) {
	return c.txnlessDo(f, arg, func(ctx context.Context) (any, error) {
		_, err := c.conn.Exec(ctx, sql, args...)
		return nil, err
	})
}

// txnlessDo is txnless of what do sends; an OK completion records the
// value do returns, or arg if nil.
func (c *client) txnlessDo(f string, arg any, do func(ctx context.Context) (any, error)) (string, error) {
	label := c.label()
	c.rec.Invoke(c.process, c.node+1, f, arg, label)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := c.connect(ctx)
	if err == nil {
		_, err = c.conn.Exec(ctx, "SET ordo.txn_label = '"+label+"'")
	}
	if err != nil {
		if c.conn != nil && (sqlstate(err) == "" || c.conn.IsClosed()) {
			c.close()
		}
		c.rec.Record(history.Fail, c.process, c.node+1, f, arg, errText(err))
		return history.Fail, err
	}
	value, err := do(ctx)
	typ := history.OK
	if err != nil {
		typ = history.Info
		if c.didNotCommit(err) {
			typ = history.Fail
		}
		if sqlstate(err) == "" || c.conn.IsClosed() {
			c.close()
		}
		c.rec.Record(typ, c.process, c.node+1, f, arg, errText(err))
		return typ, err
	}
	if value == nil {
		value = arg
	}
	c.rec.Record(typ, c.process, c.node+1, f, value, "")
	return typ, nil
}
