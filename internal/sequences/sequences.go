// Package sequences keeps every node's sequences from handing out the same
// value: each sequence on node i is normalized to INCREMENT BY stride and a
// position ≡ offset (mod stride), with offset = i and stride larger than
// the largest cluster. Sequence state itself is never replicated (neither
// logical decoding nor Ordo carries it); rows carry the values they got.
//
// The visible consequences (documented for users in docs/sequences.md): ids
// have gaps, and ids from different nodes interleave, so they are not
// monotonic across the cluster, as with Galera's auto_increment_increment
// and auto_increment_offset.
//
// This package only builds SQL; it never runs anything itself.
package sequences

import "fmt"

// DefaultStride is the default cluster stride; it must exceed the largest
// node id (config.MaxNodes).
const DefaultStride = 100

// NormalizeSQL returns a statement that normalizes, in the current
// transaction, every user sequence whose increment, position or START is
// not the node's: it restarts such a sequence at the smallest value ≡
// offset (mod stride) above both its own position and the largest value
// already in the column that owns it (rows applied from other nodes carry
// their values), and moves its START to the smallest value ≡ offset not
// below it, so that a restart to START (TRUNCATE … RESTART IDENTITY, which
// no normalization follows, run by a client here or replayed from another
// node) stays in the node's class. Descending sequences are left alone, and
// so are sequences owned by roles the current one does not act for (their
// owners' DDL normalized them).
//
// The statement reads the owning table of every sequence it moves, so it
// runs only at a node's start, when nothing else runs; after DDL and setval
// the node runs NormalizeTouchedSQL.
func NormalizeSQL(stride, offset int) string {
	return normalizeSQL(stride, offset, "")
}

// NormalizeTouchedSQL is NormalizeSQL for the sequences the current
// transaction created, altered, set or advanced: those it holds a lock on
// stronger than ACCESS SHARE (reading a sequence's position takes that,
// and Ordo reads them all around a setval). Those are the only sequences a
// transaction can move out of the node's class. Normalizing the others too
// made two transactions deadlock: one adding a primary key to a table
// (ACCESS EXCLUSIVE on it) whose sequence another had just moved with
// setval (RowExclusive on the sequence until it ends; setval is visible at
// once), the first waiting to ALTER that sequence, the second to read the
// table's largest id: a parallel pg_restore did exactly that.
func NormalizeTouchedSQL(stride, offset int) string {
	return normalizeSQL(stride, offset, `
			AND s.seqrelid IN (SELECT l.relation FROM pg_locks l
				WHERE l.locktype = 'relation' AND l.pid = pg_backend_pid() AND l.granted
				  AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
				  AND l.mode <> 'AccessShareLock')`)
}

func normalizeSQL(stride, offset int, only string) string {
	return fmt.Sprintf(`DO $ordo$
DECLARE
	r record;
	-- numeric: a sequence's next value, or its class's, may pass bigint's end
	lv numeric;
	called boolean;
	nxt numeric;
	st numeric;
	hi numeric;
	colmax numeric;
BEGIN
	FOR r IN
		SELECT s.seqrelid::regclass AS seq, s.seqincrement AS inc, s.seqmax AS maxv, s.seqstart AS st,
			(SELECT format('%%I.%%I', tn.nspname, tc.relname)
			   FROM pg_depend d JOIN pg_class tc ON tc.oid = d.refobjid JOIN pg_namespace tn ON tn.oid = tc.relnamespace
			  WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
			    AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0 AND d.deptype IN ('a', 'i') LIMIT 1) AS tbl,
			(SELECT a.attname
			   FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
			  WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
			    AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0 AND d.deptype IN ('a', 'i') LIMIT 1) AS col
		FROM pg_sequence s
		JOIN pg_class c ON c.oid = s.seqrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', '_ordo') AND c.relpersistence = 'p' AND s.seqincrement > 0
			-- Sequences of roles the current one does not act for were
			-- normalized by their owners' DDL, and it may not read them.
			AND pg_has_role(c.relowner, 'USAGE')%[3]s
	LOOP
		EXECUTE format('SELECT last_value, is_called FROM %%s', r.seq) INTO lv, called;
		IF called THEN nxt := lv + r.inc; ELSE nxt := lv; END IF;
		-- At its end (setval to its maximum): its next nextval fails on
		-- every node alike, and a setval back is normalized then.
		CONTINUE WHEN nxt > r.maxv;
		CONTINUE WHEN r.inc = %[1]d AND ((nxt %% %[1]d) + %[1]d) %% %[1]d = %[2]d
			AND ((r.st %% %[1]d) + %[1]d) %% %[1]d = %[2]d;
		st := greatest(r.st, 1); -- the MINVALUE set below
		st := st + (((%[2]d - st) %% %[1]d) + %[1]d) %% %[1]d;
		IF st > r.maxv THEN
			st := r.st; -- no value of the class fits: only a restart to a value leaves START
		END IF;
		hi := nxt - 1;
		IF r.tbl IS NOT NULL THEN
			BEGIN
				EXECUTE format('SELECT max(%%I)::numeric FROM %%s', r.col, r.tbl) INTO colmax;
				hi := greatest(hi, coalesce(colmax, hi));
			EXCEPTION WHEN others THEN
				NULL; -- a column that is not an integer: keep the sequence's own position
			END;
		END IF;
		nxt := hi + 1 + (((%[2]d - (hi + 1)) %% %[1]d) + %[1]d) %% %[1]d;
		IF nxt > r.maxv THEN
			RAISE EXCEPTION 'ordo: sequence %% cannot be normalized: next value %% would pass its maximum %%', r.seq, nxt, r.maxv;
		END IF;
		EXECUTE format('ALTER SEQUENCE %%s INCREMENT BY %[1]d MINVALUE 1 START WITH %%s RESTART WITH %%s', r.seq, st, nxt);
	END LOOP;
END
$ordo$`, stride, offset, only)
}
