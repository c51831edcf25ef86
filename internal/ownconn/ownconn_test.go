package ownconn

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestOwnDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://ordo:secret@127.0.0.1:5432/app?sslmode=disable",
		"postgres://ordo@127.0.0.1/app?options=-c%20search_path%3Dx&sslmode=disable",
		"host=/var/run/postgresql dbname=app user=ordo",
		"host=127.0.0.1 dbname=app user=ordo options='-c search_path=it\\'s'",
	} {
		own, err := DSN(dsn, 150000)
		require.NoError(t, err, dsn)
		before, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		after, err := pgx.ParseConfig(own)
		require.NoError(t, err, own)
		require.Equal(t, before.Host, after.Host, own)
		require.Equal(t, before.Port, after.Port, own)
		require.Equal(t, before.User, after.User, own)
		require.Equal(t, before.Password, after.Password, own)
		require.Equal(t, before.Database, after.Database, own)
		want := Settings
		if o := before.RuntimeParams["options"]; o != "" {
			want = o + " " + Settings // the DSN's own options kept, first
		}
		require.Equal(t, want, after.RuntimeParams["options"], own)
		require.NotContains(t, own, "+", "libpq reads no '+' as a space")
		require.Equal(t, AppName, after.RuntimeParams["application_name"], own)
	}
	for _, dsn := range []string{"host=h dbname=d application_name=mine", "postgres://h/d?application_name=mine"} {
		own, err := DSN(dsn, 150000)
		require.NoError(t, err)
		pc, err := pgx.ParseConfig(own)
		require.NoError(t, err)
		require.Equal(t, "mine", pc.RuntimeParams["application_name"], "the operator's own name is kept")
	}
	own, err := DSN("host=h dbname=d options='-c x=1'", 180000)
	require.NoError(t, err)
	pc, err := pgx.ParseConfig(own)
	require.NoError(t, err)
	require.Equal(t, "-c x=1 "+Settings+Settings17, pc.RuntimeParams["options"])
}
