# Writes through one Ordo node with psycopg 3 the ways applications do:
# autocommit statements, a transaction, pipeline mode and COPY. The test
# checks the rows on the other nodes.
import sys

import psycopg

with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute("CREATE TABLE py (id int PRIMARY KEY, how text NOT NULL)")
    conn.execute("INSERT INTO py VALUES (%s, %s)", (1, "autocommit"))
    with conn.transaction():
        conn.execute("INSERT INTO py VALUES (%s, %s)", (2, "transaction"))
        conn.execute("UPDATE py SET how = how || '!' WHERE id = %s", (2,))
    with conn.pipeline():
        for i in range(3, 8):
            conn.execute("INSERT INTO py VALUES (%s, %s)", (i, "pipeline"))
    with conn.cursor().copy("COPY py (id, how) FROM STDIN") as copy:
        for i in range(8, 108):
            copy.write_row((i, "copy"))
    print("rows", conn.execute("SELECT count(*) FROM py").fetchone()[0])
