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
// decided yet (internal/replica, bruteforce.go). Labelled transactions
// (SET ordo.txn_label) keep their label in their proof row, or, aborted,
// in _ordo.aborted; _ordo.txn_status(label) answers from both, for anyone.
// _ordo.cluster_config keeps the cluster configuration changed through the
// order (the conflict classes), with the seqno that changed it.
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
);
CREATE TABLE IF NOT EXISTS _ordo.aborted (
	seqno bigint PRIMARY KEY,
	gid   text NOT NULL,
	label text NOT NULL
);
-- Only what is missing is changed: ALTER TABLE … IF NOT EXISTS and CREATE
-- INDEX IF NOT EXISTS lock the table before they look, and a prepared
-- transaction left by a crash may hold a lock on it until this node,
-- once started, resolves it (under dbsm-rc every transaction reads
-- _ordo.applied through committed_prefix()): the start waited for good.
DO $ordo$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '_ordo.applied'::regclass AND attname = 'label' AND NOT attisdropped) THEN
		ALTER TABLE _ordo.applied ADD COLUMN label text;
	END IF;
	IF to_regclass('_ordo.applied_label') IS NULL THEN
		CREATE INDEX applied_label ON _ordo.applied (label) WHERE label IS NOT NULL;
	END IF;
	IF to_regclass('_ordo.aborted_label') IS NULL THEN
		CREATE INDEX aborted_label ON _ordo.aborted (label);
	END IF;
END
$ordo$;
CREATE TABLE IF NOT EXISTS _ordo.cluster_config (
	name  text PRIMARY KEY,
	seqno bigint NOT NULL,
	value bytea NOT NULL
);
CREATE OR REPLACE FUNCTION _ordo.txn_status(label text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT CASE
		WHEN EXISTS (SELECT 1 FROM _ordo.applied a WHERE a.label = $1) THEN 'committed'
		WHEN EXISTS (SELECT 1 FROM _ordo.aborted a WHERE a.label = $1) THEN 'aborted'
		ELSE 'unknown' END
$$;
-- The largest seqno committed here, as the calling statement sees it:
-- commits are in seqno order, so everything up to it is decided and
-- carried out in that statement's snapshot (dbsm-rc's snapshot_seqno).
CREATE OR REPLACE FUNCTION _ordo.committed_prefix() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT coalesce(max(seqno), 0) FROM _ordo.applied
$$;
GRANT USAGE ON SCHEMA _ordo TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.committed_prefix() TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.txn_status(text) TO PUBLIC;`

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
