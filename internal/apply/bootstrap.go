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
-- The position of every sequence the caller may read, for the session's
-- replay of setval (session/seqstate.go): unlike pg_sequence_last_value,
-- which says NULL, it tells a position set by setval(…, false).
DROP FUNCTION IF EXISTS _ordo.sequence_state(); -- (its columns changed)
CREATE OR REPLACE FUNCTION _ordo.sequence_state() RETURNS TABLE(sname text, lastv bigint, called bool, up bool)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT c.oid AS seq, format('%I.%I', n.nspname, c.relname) AS nm, s.seqincrement > 0 AS up
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_sequence s ON s.seqrelid = c.oid
		WHERE c.relkind = 'S' AND c.relpersistence = 'p' AND n.nspname NOT IN ('pg_catalog', 'information_schema', '_ordo')
			AND has_schema_privilege(n.oid, 'USAGE')
			AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'SELECT') END -- (only once it is known to be one)
	LOOP
		RETURN QUERY EXECUTE format('SELECT %L::text, last_value, is_called, %L::bool FROM %s', r.nm, r.up, r.seq::regclass);
	END LOOP;
END
$$;
-- The session runs prepare_mark before each PREPARE TRANSACTION, so that
-- decoding sends the PREPARE of a transaction that changed nothing it
-- decodes (session, terminate.go). Any role may: the message is empty and
-- the capture ignores it.
CREATE OR REPLACE FUNCTION _ordo.prepare_mark() RETURNS bool
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT pg_catalog.pg_logical_emit_message(true, 'ordo.mark', '') IS NOT NULL
$$;
-- Large objects (capture/largeobject.go). lo_written: the large objects
-- whose data pages the calling transaction wrote (pg_largeobject is
-- readable by superusers only; this reveals a caller its own writes).
CREATE OR REPLACE FUNCTION _ordo.lo_written() RETURNS SETOF oid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT DISTINCT l.loid FROM pg_catalog.pg_largeobject l
	WHERE l.xmin = ANY (ARRAY(SELECT transactionid FROM pg_catalog.pg_locks
		WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'transactionid'))
$$;
-- lo_pages: the stored pages of a large object the calling transaction
-- created, altered or wrote (its offset in the object, its data).
CREATE OR REPLACE FUNCTION _ordo.lo_pages(o oid) RETURNS TABLE(off bigint, data bytea)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	WITH mine AS (SELECT ARRAY(SELECT transactionid FROM pg_catalog.pg_locks
		WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'transactionid') AS x)
	SELECT l.pageno::bigint * (pg_catalog.current_setting('block_size')::int / 4), l.data
	FROM pg_catalog.pg_largeobject l, mine
	WHERE l.loid = o AND (
		EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject_metadata m WHERE m.oid = o AND m.xmin = ANY (mine.x))
		OR EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject p WHERE p.loid = o AND p.xmin = ANY (mine.x)))
	ORDER BY l.pageno
$$;
-- lo_set gives a large object the state another node's transaction left
-- it in (an apply: Ordo's own role, event triggers off): it creates it if
-- it does not exist, sets its owner, privileges and comment, and, with
-- content, empties it for the pieces of its content that follow
-- (lo_put); lo_drop unlinks one, if it exists.
DROP FUNCTION IF EXISTS _ordo.lo_set(oid, name, text, bool, text, bytea);
CREATE OR REPLACE FUNCTION _ordo.lo_set(o oid, owner name, acl text, has_comment bool, cmt text, content bool) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	fd int4;
	cur aclitem[];
	r record;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_largeobject_metadata WHERE oid = o) THEN
		PERFORM lo_create(o);
	ELSIF content THEN
		-- Afresh, with no page left over: its stored pages become the
		-- origin's.
		PERFORM lo_unlink(o);
		PERFORM lo_create(o);
	END IF;
	EXECUTE format('ALTER LARGE OBJECT %s OWNER TO %I', o, owner);
	SELECT lomacl INTO cur FROM pg_largeobject_metadata WHERE oid = o;
	IF cur IS DISTINCT FROM acl::aclitem[] THEN
		FOR r IN SELECT DISTINCT grantee FROM aclexplode(cur) LOOP
			EXECUTE format('REVOKE ALL ON LARGE OBJECT %s FROM %s', o,
				CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
		END LOOP;
		IF acl IS NULL THEN
			-- The default: the owner holds every privilege.
			EXECUTE format('GRANT ALL ON LARGE OBJECT %s TO %I', o, owner);
		ELSE
			FOR r IN SELECT * FROM aclexplode(acl::aclitem[]) LOOP
				EXECUTE format('GRANT %s ON LARGE OBJECT %s TO %s%s', r.privilege_type, o,
					CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r.grantee)) END,
					CASE WHEN r.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
			END LOOP;
		END IF;
	END IF;
	IF has_comment THEN
		EXECUTE format('COMMENT ON LARGE OBJECT %s IS %L', o, cmt);
	ELSIF obj_description(o, 'pg_largeobject') IS NOT NULL THEN
		EXECUTE format('COMMENT ON LARGE OBJECT %s IS NULL', o);
	END IF;
END
$$;
CREATE OR REPLACE FUNCTION _ordo.lo_size(o oid, size bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	fd int4;
BEGIN
	fd := lo_open(o, 131072);
	PERFORM lo_truncate64(fd, size);
	PERFORM lo_close(fd);
END
$$;
CREATE OR REPLACE FUNCTION _ordo.lo_drop(o oid) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
	SELECT lo_unlink(o) FROM pg_largeobject_metadata WHERE oid = o
$$;
REVOKE EXECUTE ON FUNCTION _ordo.lo_set(oid, name, text, bool, text, bool) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _ordo.lo_drop(oid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _ordo.lo_size(oid, bigint) FROM PUBLIC;
GRANT USAGE ON SCHEMA _ordo TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.lo_written() TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.lo_pages(oid) TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.prepare_mark() TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.committed_prefix() TO PUBLIC;
GRANT EXECUTE ON FUNCTION _ordo.txn_status(text) TO PUBLIC;`

// prepareCheckSQL creates _ordo.prepare_check, which the session runs in
// the round trip that prepares a transaction that changed rows, inside a
// savepoint, before its PREPARE TRANSACTION (session, terminate.go,
// prepareAtOnce). It fails with OR001 when the transaction needs the
// session's own write probe first: it has no xid, the session has a
// temporary schema (the transaction may have touched a temporary object,
// which PostgreSQL cannot prepare, or written only those, which commit
// here), it changed large objects (read before the PREPARE), or it runs at
// SERIALIZABLE (under dbsm-si its reads are then certified, which the
// probe tells the session; under the other protocols it never does unless
// the client set transaction_isolation itself). Otherwise
// it returns the transaction's ordo.txn_label and resets it, as the RESET
// before a PREPARE does (a RESET in a transaction that is prepared stays
// in force). The error is a signal to the session, which rolls back to
// the savepoint and probes; the server log shows it once per session at
// most.
var prepareCheckSQL = `CREATE OR REPLACE FUNCTION _ordo.prepare_check() RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	label text := coalesce(current_setting('ordo.txn_label', true), '');
BEGIN
	IF pg_current_xact_id_if_assigned() IS NULL OR pg_my_temp_schema() <> 0 OR ` + capture.LargeObjectsChanged + `
		OR current_setting('transaction_isolation') = 'serializable' THEN
		RAISE EXCEPTION 'ordo: this transaction needs Ordo''s write probe before its PREPARE (not an error: Ordo probes and prepares it next)'
			USING ERRCODE = 'OR001';
	END IF;
	IF label <> '' THEN
		RESET ordo.txn_label;
	END IF;
	RETURN label;
END
$$;
GRANT EXECUTE ON FUNCTION _ordo.prepare_check() TO PUBLIC;`

// Bootstrap creates the ordo schema and its tables if they do not exist,
// and installs the event triggers that record DDL (capture.DDLTriggerSQL).
// It is idempotent; run it once per node before the first Open.
func Bootstrap(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, bootstrapSQL); err != nil {
		return fmt.Errorf("apply: bootstrap: %w", err)
	}
	if _, err := conn.Exec(ctx, prepareCheckSQL); err != nil {
		return fmt.Errorf("apply: bootstrap: _ordo.prepare_check: %w", err)
	}
	if _, err := conn.Exec(ctx, capture.DDLTriggerSQL); err != nil {
		return fmt.Errorf("apply: bootstrap: the DDL event triggers: %w", err)
	}
	return nil
}
