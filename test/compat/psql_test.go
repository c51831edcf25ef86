package compat

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const psqlScript = `\set n 5
\set greeting 'hello'
CREATE TABLE items(id int PRIMARY KEY, name text, price numeric);
INSERT INTO items SELECT g, 'item' || g, g * 1.5 FROM generate_series(1, :n) g;
SELECT :'greeting' AS greeting, count(*) FROM items;
BEGIN;
UPDATE items SET price = price * 2 WHERE id <= 2;
SELECT sum(price) FROM items;
COMMIT;
SELECT 1 AS one \; SELECT 2 AS two \; SELECT count(*) FROM items;
\copy items FROM 'DATAFILE' WITH (FORMAT csv)
\copy (SELECT * FROM items ORDER BY id) TO STDOUT WITH (FORMAT csv)
SELECT 1/0;
BEGIN;
SELECT 1/0;
SELECT 1;
ROLLBACK;
SELECT name FROM items WHERE id = :n;
\echo :greeting
LISTEN compat_chan;
NOTIFY compat_chan, 'psql payload';
SET application_name = 'compat_psql';
SHOW application_name;
DO $$BEGIN RAISE NOTICE 'notice from %', 'plpgsql'; END$$;
`

func TestPsql(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "items.csv")
	if err := os.WriteFile(data, []byte("100,copied1,1.25\n101,\"copied, two\",2.50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(psqlScript, "DATAFILE", data)), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := regexp.MustCompile(`PID \d+`)
	out := same(t, func(t *testing.T, tg target) string {
		cmd := exec.Command("psql", "-X", "-f", script)
		cmd.Env = tg.env()
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("psql against %s: %v\n%s", tg.name, err, b)
		}
		// A multi-statement string sent as one Query.
		cmd = exec.Command("psql", "-X", "-c", "SELECT 'a' AS x; SELECT 'b' AS y; SELECT count(*) FROM items")
		cmd.Env = tg.env()
		b2, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("psql -c against %s: %v\n%s", tg.name, err, b2)
		}
		return pid.ReplaceAllString(string(b)+string(b2), "PID n")
	})
	for _, want := range []string{"hello", "COPY 2", `101,"copied, two",2.50`, "division by zero",
		"current transaction is aborted", `Asynchronous notification "compat_chan" with payload "psql payload"`,
		"compat_psql", "NOTICE:  notice from plpgsql", " 7\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("psql output lacks %q:\n%s", want, out)
		}
	}
}

func TestPgbench(t *testing.T) {
	tgs := targets(t)
	var results []string
	for _, tg := range tgs {
		run := func(args ...string) string {
			t.Helper()
			cmd := exec.Command("pgbench", args...)
			cmd.Env = tg.env()
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("pgbench %v against %s: %v\n%s", args, tg.name, err, b)
			}
			return string(b)
		}
		run("-i", "-s", "1", "-q")
		for _, mode := range []string{"simple", "extended", "prepared"} {
			out := run("-n", "-c", "4", "-j", "2", "-t", "50", "-M", mode)
			if !strings.Contains(out, "number of transactions actually processed: 200/200") {
				t.Fatalf("pgbench -M %s against %s:\n%s", mode, tg.name, out)
			}
			if !strings.Contains(out, "number of failed transactions: 0 ") {
				t.Fatalf("pgbench -M %s against %s had failures:\n%s", mode, tg.name, out)
			}
		}
		// Every TPC-B-like transaction is in the history and balances add up.
		cmd := exec.Command("psql", "-X", "-At", "-c",
			"SELECT count(*), (SELECT sum(abalance) FROM pgbench_accounts) = sum(delta), (SELECT sum(tbalance) FROM pgbench_tellers) = sum(delta) FROM pgbench_history")
		cmd.Env = tg.env()
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		results = append(results, string(b))
	}
	if results[0] != "600|t|t\n" || results[1] != results[0] {
		t.Fatalf("history check direct %q through ordo %q, want 600|t|t", results[0], results[1])
	}
}
