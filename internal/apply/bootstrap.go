package apply

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/capture"
)

// bootstrapSQL creates Ordo's bookkeeping schema. _ordo.applied holds the
// proof of every applied write set: its row is inserted in the same
// PostgreSQL transaction as the write set's rows, so both commit or
// neither. The capture recognises applies by that insert.
// _ordo.rolled_back records, before it is done, each early rollback of a
// prepared transaction of this node whose outcome the order had not
// decided yet (internal/replica, bruteforce.go).
const bootstrapSQL = `
CREATE SCHEMA IF NOT EXISTS _ordo;
CREATE TABLE IF NOT EXISTS _ordo.applied (
	seqno      bigint PRIMARY KEY,
	gid        text NOT NULL UNIQUE,
	applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS _ordo.rolled_back (
	gid text PRIMARY KEY,
	at  timestamptz NOT NULL DEFAULT now()
);`

// Bootstrap creates the ordo schema and its tables if they do not exist,
// and installs the event triggers that record DDL (capture.DDLTriggerSQL).
// It is idempotent; run it once per node before the first Open.
func Bootstrap(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, bootstrapSQL); err != nil {
		return fmt.Errorf("apply: bootstrap: %w", err)
	}
	if _, err := conn.Exec(ctx, capture.DDLTriggerSQL); err != nil {
		return fmt.Errorf("apply: bootstrap: the DDL event triggers: %w", err)
	}
	return nil
}
