package capture

import (
	"encoding/json"
	"fmt"
)

// DDLMessagePrefix is the prefix of the transactional logical messages in
// which the event triggers of DDLTriggerSQL record each DDL command that
// runs (pg_logical_emit_message). Being part of the transaction, a record
// rolls back with the savepoint or the transaction that ran the command,
// so the decoded write set holds exactly the DDL that committed.
const DDLMessagePrefix = "ordo.ddl"

// DDLTriggerSQL installs, idempotently, the event triggers that record DDL
// from what runs (DESIGN.md "DDL: captured from what commits"). One record
// per command (ddl_command_end), unless every object it touched is
// temporary or belongs to an extension's script: its command tag, the
// text of the client's top-level query (current_query(); only its hash
// when it repeats the previous record's query in the transaction, so a
// long migration sent as one string is not recorded once per command),
// the objects it created or changed, the settings it ran under and who
// ran it. sql_drop records the objects a command dropped in a message of
// its own, used for certification keys only.
//
// Each trigger also notes, in transaction-local settings the session's
// write probe reads, that the transaction touched a temporary object
// (ordo.temp_touched: a dropped one leaves no other trace) or recorded
// replicated DDL (ordo.ddl_replicated).
//
// The triggers do not fire for Ordo's applies (session_replication_role
// is replica there) and cannot be called directly. EXECUTE on
// pg_logical_emit_message is revoked from PUBLIC (PostgreSQL grants it to
// everyone), so only superusers and the triggers can emit a message: an
// ordinary role cannot forge a record.
const DDLTriggerSQL = `
CREATE OR REPLACE FUNCTION _ordo.ddl_dropped() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
	objs pg_catalog.jsonb := '[]';
	r record;
	temp bool := false;
BEGIN
	FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
		IF r.is_temporary THEN
			temp := true;
		ELSE
			objs := objs || jsonb_build_array(jsonb_build_array(r.object_type, r.schema_name, r.object_name, r.object_identity));
		END IF;
	END LOOP;
	IF temp THEN
		PERFORM set_config('ordo.temp_touched', 'on', true);
	END IF;
	-- The command dropped something (ddl_command_end, which fires next
	-- and sees no objects, reads it): only temporary objects ('on'; not
	-- recorded then), or replicated ones too ('some').
	PERFORM set_config('ordo.drop_temp', CASE WHEN temp AND jsonb_array_length(objs) = 0 THEN 'on' ELSE 'some' END, true);
	IF jsonb_array_length(objs) > 0 THEN
		PERFORM set_config('ordo.ddl_replicated', 'on', true);
		PERFORM pg_logical_emit_message(true, 'ordo.ddl', jsonb_build_object('d', objs)::text);
	END IF;
END
$f$;

CREATE OR REPLACE FUNCTION _ordo.ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER AS $f$
DECLARE
	-- The client's search_path, read before anything else with a
	-- qualified call; every type here is qualified too (they are resolved
	-- under the caller's search_path, where pg_temp comes first). The
	-- body runs under pg_catalog alone, set here rather than on the
	-- function, which would hide the client's search_path.
	saved pg_catalog.text := pg_catalog.current_setting('search_path');
	objs pg_catalog.jsonb;
	commands pg_catalog.int4;
	q pg_catalog.text;
	h pg_catalog.text;
	r record;
	keyless pg_catalog.oid[] := '{}';
	t pg_catalog.oid;
	dropped pg_catalog.text;
	noop pg_catalog.bool;
BEGIN
	IF pg_catalog.current_setting('ordo.identity', true) = 'on' THEN
		RETURN; -- the ALTER TABLE … REPLICA IDENTITY FULL below
	END IF;
	PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
	objs := '[]';
	commands := 0;
	q := current_query();
	h := md5(q);
	FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
		commands := commands + 1;
		IF coalesce(r.schema_name LIKE 'pg\_temp%', false) OR coalesce(r.object_identity LIKE 'pg\_temp.%', false) THEN
			PERFORM set_config('ordo.temp_touched', 'on', true);
			CONTINUE; -- a temporary object
		END IF;
		IF r.in_extension THEN
			CONTINUE; -- an extension's script (its CREATE EXTENSION is recorded)
		END IF;
		IF lower(r.object_type) = 'large object' THEN
			CONTINUE; -- its state is replicated with its content (largeobject.go)
		END IF;
		objs := objs || jsonb_build_array(jsonb_build_array(r.object_type, r.schema_name, NULL, r.object_identity));
		IF r.object_type = 'table' THEN
			keyless := keyless || r.objid;
		END IF;
	END LOOP;
	-- A table without a primary key is made REPLICA IDENTITY FULL at
	-- once, so that the transaction that created it (or dropped its key)
	-- can update and delete its rows (capture.ReplicaIdentitySQL, which
	-- every node also runs after DDL, explains why).
	FOREACH t IN ARRAY keyless LOOP
		IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t AND c.relkind = 'r' AND c.relpersistence = 'p' AND c.relreplident = 'd')
			AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = t AND i.indisprimary) THEN
			PERFORM set_config('ordo.identity', 'on', true);
			EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', t::regclass);
			PERFORM set_config('ordo.identity', '', true);
		END IF;
	END LOOP;
	dropped := coalesce(current_setting('ordo.drop_temp', true), '');
	IF dropped <> '' THEN
		PERFORM set_config('ordo.drop_temp', '', true);
	END IF;
	IF commands = 0 AND dropped = 'on' THEN
		PERFORM set_config('search_path', saved, true);
		RETURN; -- it dropped only temporary objects
	END IF;
	-- A command that did nothing at all (IF NOT EXISTS of what exists,
	-- IF EXISTS of what does not; a DROP is the one command that does
	-- something without a row here) is recorded, marked: the session
	-- counts a query string's records to tell which of its statements
	-- ran, but replays none for it, and it makes the transaction no
	-- replicated DDL. Its replay could do something on a node where a
	-- concurrent transaction had made the object exist or not.
	noop := commands = 0 AND dropped = '';
	IF commands > 0 AND jsonb_array_length(objs) = 0 THEN
		PERFORM set_config('search_path', saved, true);
		RETURN;
	END IF;
	-- A record repeating the previous one's query omits it. The setting
	-- is the client's to change: a wrong one only makes the decoder fail
	-- this transaction's write set.
	IF current_setting('ordo.ddl_last', true) = h THEN
		q := NULL;
	ELSE
		PERFORM set_config('ordo.ddl_last', h, true);
	END IF;
	IF NOT noop THEN
		PERFORM set_config('ordo.ddl_replicated', 'on', true);
	END IF;
	PERFORM pg_logical_emit_message(true, 'ordo.ddl', jsonb_build_object('h', h, 'q', q, 't', tg_tag, 'o', objs, 'n', noop,
		's', jsonb_build_array(
			jsonb_build_array('search_path', saved),
			jsonb_build_array('TimeZone', current_setting('TimeZone')),
			jsonb_build_array('DateStyle', current_setting('DateStyle')),
			jsonb_build_array('IntervalStyle', current_setting('IntervalStyle')),
			jsonb_build_array('standard_conforming_strings', current_setting('standard_conforming_strings'))),
		'r', jsonb_build_array(session_user::text, current_setting('role')))::text);
	PERFORM set_config('search_path', saved, true);
END
$f$;

-- A table rewrite that fills a column from a volatile default (random(),
-- nextval() of ADD COLUMN … serial or an identity, clock_timestamp())
-- computes different values on every node that replays it: refuse it at
-- the origin. A rewrite for a stored generated column (its expression is
-- immutable) or a domain's constraint gives the same rows everywhere: the
-- columns the transaction added or changed (their pg_attribute rows were
-- written by one of its (sub)transactions) are looked at for an identity
-- or a default that calls a volatile function.
CREATE OR REPLACE FUNCTION _ordo.ddl_rewrite() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
	nonempty bool;
	t oid := pg_event_trigger_table_rewrite_oid();
BEGIN
	IF (pg_event_trigger_table_rewrite_reason() & 2) = 0 THEN
		RETURN;
	END IF;
	IF NOT EXISTS (
		SELECT 1 FROM pg_attribute a
		WHERE a.attrelid = t AND a.attnum > 0 AND NOT a.attisdropped
			AND a.xmin::text::bigint = ANY (ARRAY(SELECT transactionid::text::bigint FROM pg_locks
				WHERE pid = pg_backend_pid() AND locktype = 'transactionid'))
			AND (a.attidentity <> '' OR EXISTS (
				SELECT 1 FROM pg_attrdef d, regexp_matches(d.adbin, ':(?:op)?funcid (\d+)', 'g') m, pg_proc p
				WHERE d.adrelid = t AND d.adnum = a.attnum AND p.oid = m[1]::oid AND p.provolatile = 'v'))) THEN
		RETURN; -- a generated column, a domain's check: the same rows everywhere
	END IF;
	EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', t::regclass) INTO nonempty;
	IF nonempty THEN -- an empty table has no values to differ
		RAISE EXCEPTION 'ordo: % would fill the rows of % from a volatile default, which gives different values on every node', tg_tag, t::regclass
			USING ERRCODE = 'feature_not_supported',
			HINT = 'Add the column without a default (or with a constant one), then set its values with UPDATE, which is replicated row by row; then SET DEFAULT for new rows.';
	END IF;
END
$f$;

-- Only superusers (and the triggers above, which run as one) may emit
-- logical messages: an ordinary role could otherwise forge a DDL record
-- that the other nodes would replay as a superuser.
DO $$
DECLARE
	f regprocedure;
BEGIN
	FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
		WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace LOOP
		EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
	END LOOP;
END
$$;

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ordo_ddl_dropped') THEN
		CREATE EVENT TRIGGER ordo_ddl_dropped ON sql_drop EXECUTE FUNCTION _ordo.ddl_dropped();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ordo_ddl_end') THEN
		CREATE EVENT TRIGGER ordo_ddl_end ON ddl_command_end EXECUTE FUNCTION _ordo.ddl_end();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ordo_ddl_rewrite') THEN
		CREATE EVENT TRIGGER ordo_ddl_rewrite ON table_rewrite EXECUTE FUNCTION _ordo.ddl_rewrite();
	END IF;
END
$$;`

// DDLRecord is one DDL command a transaction ran, as its event trigger
// recorded it.
type DDLRecord struct {
	// Query is the client's top-level query that ran it (the whole
	// string of a simple-protocol Query, the text of an extended-protocol
	// Parse), QueryHash its md5 in hex.
	Query, QueryHash string
	// Tag is the command tag ("CREATE TABLE").
	Tag string
	// Objects are the objects it created, changed or dropped.
	Objects []DDLObject
	// Settings are the session settings it ran under that change how a
	// statement is parsed or what it computes (search_path, TimeZone,
	// DateStyle, IntervalStyle, standard_conforming_strings), in a fixed
	// order.
	Settings []Setting
	// SessionUser and Role (SET ROLE; "none" if unset) ran it.
	SessionUser, Role string
	// RowsBefore is how many rows of the write set the transaction
	// changed before it ran the command (decoding order): the other nodes
	// replay it after those rows and before the rest.
	RowsBefore int
	// NoOp: the command did nothing (IF NOT EXISTS of what exists, IF
	// EXISTS of what does not); it is recorded only so that the records
	// of a query string account for each statement, and is not replayed.
	NoOp bool
}

// Setting is a run-time parameter and its value.
type Setting struct{ Name, Value string }

// Settings of a replay that are not run-time parameters set with
// set_config: who runs it (SET SESSION AUTHORIZATION, SET ROLE).
const (
	SettingSessionAuthorization = "session_authorization"
	SettingRole                 = "role"
)

// DDLObject is an object a DDL command touched.
type DDLObject struct {
	Type     string // "table", "index", "type", "table column", …
	Schema   string // empty for objects outside schemas
	Name     string // the object's own name, when known (dropped objects)
	Identity string // its identity, as pg_identify_object gives it
}

// parseDDLMessage decodes a message of the triggers: a record, or (dropped
// != nil) the objects a command dropped. prev is the transaction's
// previous record, whose query a repeated one shares.
func parseDDLMessage(content []byte, prev *DDLRecord) (rec DDLRecord, dropped []DDLObject, err error) {
	var m struct {
		D [][]*string `json:"d"`
		H string      `json:"h"`
		Q *string     `json:"q"`
		T string      `json:"t"`
		N bool        `json:"n"`
		O [][]*string `json:"o"`
		S [][]string  `json:"s"`
		R []string    `json:"r"`
	}
	if err := json.Unmarshal(content, &m); err != nil {
		return DDLRecord{}, nil, fmt.Errorf("DDL record: %v", err)
	}
	if m.D != nil {
		dropped, err := objects(m.D)
		if len(dropped) == 0 && err == nil {
			err = fmt.Errorf("DDL record: no dropped objects")
		}
		return DDLRecord{}, dropped, err
	}
	r := DDLRecord{QueryHash: m.H, Tag: m.T, NoOp: m.N}
	for _, kv := range m.S {
		if len(kv) != 2 {
			return DDLRecord{}, nil, fmt.Errorf("DDL record: setting with %d fields", len(kv))
		}
		r.Settings = append(r.Settings, Setting{Name: kv[0], Value: kv[1]})
	}
	if len(m.R) == 2 {
		r.SessionUser, r.Role = m.R[0], m.R[1]
	}
	switch {
	case m.Q != nil:
		r.Query = *m.Q
	case prev != nil && prev.QueryHash == m.H:
		r.Query = prev.Query
	default:
		return DDLRecord{}, nil, fmt.Errorf("DDL record repeats a query the transaction did not record")
	}
	if r.QueryHash == "" || r.Tag == "" {
		return DDLRecord{}, nil, fmt.Errorf("DDL record without a query hash or a tag")
	}
	r.Objects, err = objects(m.O)
	return r, nil, err
}

func objects(in [][]*string) ([]DDLObject, error) {
	var out []DDLObject
	for _, o := range in {
		if len(o) != 4 {
			return nil, fmt.Errorf("DDL record: object with %d fields", len(o))
		}
		s := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		out = append(out, DDLObject{Type: s(o[0]), Schema: s(o[1]), Name: s(o[2]), Identity: s(o[3])})
	}
	return out, nil
}
