package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// TestDatabaseEncodings: a database in another encoding than UTF8 is
// replicated. In LATIN1 PostgreSQL converts text for every connection,
// and every node holds the same characters. SQL_ASCII stores any bytes,
// and the order carries text as UTF-8: a transaction holding text that
// is not UTF-8 is refused with 22021, naming where (it was refused as a
// 40001 to retry, which could never succeed), and nothing of it
// commits anywhere; other text is replicated.
func TestDatabaseEncodings(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{"LATIN1", "SQL_ASCII"} {
		t.Run(enc, func(t *testing.T) {
			db := strings.ToLower(enc)
			var direct []string
			c := startClusterWith(t, 3, "dbsm", func(cfg *config.Node) {
				conn, err := pgx.Connect(context.Background(), cfg.Postgres)
				require.NoError(t, err)
				_, err = conn.Exec(context.Background(), "create database "+db+" encoding '"+enc+"' lc_collate 'C' lc_ctype 'C' template template0")
				conn.Close(context.Background())
				require.NoError(t, err)
				cfg.Postgres = strings.Replace(cfg.Postgres, "/postgres", "/"+db, 1)
				direct = append(direct, cfg.Postgres)
			})
			ctx := context.Background()
			o, err := pgx.Connect(ctx, strings.Replace(c.dsn(0), "/postgres", "/"+db, 1))
			require.NoError(t, err)
			defer o.Close(ctx)
			mustExec(t, o)("create table enc(k int primary key, v text)")
			mustExec(t, o)("insert into enc values (1, 'café'), (2, 'plain')")
			want := "[{1 café} {2 plain}]"
			if enc == "SQL_ASCII" {
				// 'caf' and the byte 0xe9: LATIN1's é, not UTF-8.
				_, err := o.Exec(ctx, `insert into enc values (3, convert_from('\x636166e9'::bytea, 'SQL_ASCII'))`)
				var pe *pgconn.PgError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, "22021", pe.Code, pe.Message)
				require.Contains(t, pe.Message, `a value of column "v" of table "public"."enc"`)
				require.Contains(t, pe.Message, "rolled back")
				mustExec(t, o)("insert into enc values (4, 'after')")
				want = "[{1 café} {2 plain} {4 after}]"
			}
			c.waitConverged()
			for i, dsn := range direct {
				d, err := pgx.Connect(ctx, dsn)
				require.NoError(t, err)
				rows, err := d.Query(ctx, "select k, v from enc order by k")
				require.NoError(t, err)
				got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
					K int
					V string
				}])
				d.Close(ctx)
				require.NoError(t, err)
				require.Equal(t, want, fmt.Sprint(got), "node %d", i+1)
			}
			require.Zero(t, c.unreplicated(0))
		})
	}
}
