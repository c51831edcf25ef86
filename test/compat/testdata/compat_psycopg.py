"""Runs a fixed psycopg 3 session and prints its results; the Go test runs it
directly against PostgreSQL and through Ordo and compares the output."""
import sys

import psycopg

with psycopg.connect(sys.argv[1]) as conn:
    conn.execute("CREATE TABLE p(id int PRIMARY KEY, v text)")
    conn.commit()
    # Pipeline mode: many statements before one Sync.
    with conn.pipeline():
        cur = conn.cursor()
        for i in range(20):
            cur.execute("INSERT INTO p VALUES (%s, %s)", (i, f"v{i}"))
        cur.execute("SELECT count(*), sum(id) FROM p")
    print("pipeline", cur.fetchone())
    conn.commit()
    with conn.cursor() as cur:
        with cur.copy("COPY p (id, v) FROM STDIN") as copy:
            for i in range(100, 600):
                copy.write_row((i, f"copied {i}"))
        print("copy in", cur.rowcount)
        out = []
        with cur.copy("COPY (SELECT * FROM p WHERE id < 3 OR id > 597 ORDER BY id) TO STDOUT") as copy:
            for row in copy.rows():
                out.append(row)
        print("copy out", out)
    conn.commit()
    try:
        conn.execute("INSERT INTO p VALUES (1, 'dup')")
    except psycopg.errors.UniqueViolation as e:
        print("error", e.sqlstate)
        conn.rollback()
    print("after", conn.execute("SELECT v FROM p WHERE id = 599").fetchone())
