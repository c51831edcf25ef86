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
// per top-level command that touched at least one object that is not
// temporary: its command tag, the text of the client's top-level query
// (current_query(); only its hash when it repeats the previous record's
// query in the transaction, so a long migration sent as one string is not
// recorded once per command), and the objects it created, changed or
// dropped. sql_drop, which fires just before ddl_command_end, leaves the
// objects it dropped for ddl_command_end in a transaction-local setting.
//
// The triggers do not fire for Ordo's applies (session_replication_role
// is replica there) and cannot be called directly; the messages can be
// emitted only by superusers (pg_logical_emit_message), so an ordinary
// role cannot forge a record.
const DDLTriggerSQL = `
CREATE OR REPLACE FUNCTION _ordo.ddl_dropped() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
	objs jsonb := '[]';
	r record;
BEGIN
	FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
		IF NOT r.is_temporary THEN
			objs := objs || jsonb_build_array(jsonb_build_array(r.object_type, r.schema_name, r.object_name, r.object_identity));
		END IF;
	END LOOP;
	PERFORM set_config('ordo.ddl_dropped', CASE WHEN jsonb_array_length(objs) = 0 THEN 'temp' ELSE objs::text END, true);
END
$f$;

CREATE OR REPLACE FUNCTION _ordo.ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER AS $f$
DECLARE
	-- The client's search_path, read before anything else, with
	-- qualified calls only; the rest runs under pg_catalog alone (set
	-- here rather than on the function, which would hide the client's).
	saved text := pg_catalog.current_setting('search_path');
	objs jsonb := '[]';
	commands int := 0;
	dropped text;
	q text;
	h text;
	r record;
BEGIN
	PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
	dropped := coalesce(current_setting('ordo.ddl_dropped', true), '');
	q := current_query();
	h := md5(q);
	PERFORM set_config('ordo.ddl_dropped', '', true);
	FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
		commands := commands + 1;
		IF coalesce(r.schema_name LIKE 'pg\_temp%', false) OR r.object_identity LIKE 'pg\_temp.%' THEN
			CONTINUE;
		END IF;
		objs := objs || jsonb_build_array(jsonb_build_array(r.object_type, r.schema_name, NULL, r.object_identity));
	END LOOP;
	IF dropped NOT IN ('', 'temp') THEN
		objs := objs || dropped::jsonb;
	END IF;
	IF jsonb_array_length(objs) = 0 AND (commands > 0 OR dropped = 'temp') THEN
		PERFORM set_config('search_path', saved, true);
		RETURN; -- temporary objects only: nothing to replicate
	END IF;
	IF current_setting('ordo.ddl_last', true) = h THEN
		q := NULL;
	ELSE
		PERFORM set_config('ordo.ddl_last', h, true);
	END IF;
	PERFORM pg_logical_emit_message(true, 'ordo.ddl', jsonb_build_object('h', h, 'q', q, 't', tg_tag, 'o', objs,
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

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ordo_ddl_dropped') THEN
		CREATE EVENT TRIGGER ordo_ddl_dropped ON sql_drop EXECUTE FUNCTION _ordo.ddl_dropped();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'ordo_ddl_end') THEN
		CREATE EVENT TRIGGER ordo_ddl_end ON ddl_command_end EXECUTE FUNCTION _ordo.ddl_end();
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
}

// Setting is a run-time parameter and its value.
type Setting struct{ Name, Value string }

// DDLObject is an object a DDL command touched.
type DDLObject struct {
	Type     string // "table", "index", "type", "table column", …
	Schema   string // empty for objects outside schemas
	Name     string // the object's own name, when known (dropped objects)
	Identity string // its identity, as pg_identify_object gives it
}

// parseDDLRecord decodes a record's message content; prev is the
// transaction's previous record, whose query a repeated one shares.
func parseDDLRecord(content []byte, prev *DDLRecord) (DDLRecord, error) {
	var m struct {
		H string      `json:"h"`
		Q *string     `json:"q"`
		T string      `json:"t"`
		O [][]*string `json:"o"`
		S [][]string  `json:"s"`
		R []string    `json:"r"`
	}
	if err := json.Unmarshal(content, &m); err != nil {
		return DDLRecord{}, fmt.Errorf("%w: DDL record: %v", ErrProtocol, err)
	}
	r := DDLRecord{QueryHash: m.H, Tag: m.T}
	for _, kv := range m.S {
		if len(kv) != 2 {
			return DDLRecord{}, fmt.Errorf("%w: DDL record: setting with %d fields", ErrProtocol, len(kv))
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
		return DDLRecord{}, fmt.Errorf("%w: DDL record repeats a query the transaction did not record", ErrProtocol)
	}
	for _, o := range m.O {
		if len(o) != 4 {
			return DDLRecord{}, fmt.Errorf("%w: DDL record: object with %d fields", ErrProtocol, len(o))
		}
		s := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		r.Objects = append(r.Objects, DDLObject{Type: s(o[0]), Schema: s(o[1]), Name: s(o[2]), Identity: s(o[3])})
	}
	return r, nil
}
