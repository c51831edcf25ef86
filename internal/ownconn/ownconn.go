// Package ownconn makes the connection strings of Ordo's own connections
// to PostgreSQL (a node's, a joiner's to its donor): the same server and
// credentials, without the timeouts that postgresql.conf, ALTER DATABASE
// or ALTER ROLE set for sessions. It must never be used for a client's
// session, which keeps the settings its database gives it.
package ownconn

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Settings are what the node's own connections to PostgreSQL run with,
// whatever postgresql.conf, ALTER DATABASE or ALTER ROLE give sessions:
// they bound what clients do, and a timeout that fires in an apply, a
// replay of DDL, a COPY of a large transaction or the delivery loop's
// connection (idle between batches) would only make the node stop and
// replay the same work again, for good: the apply failed until the node
// refused updates as inconsistent.
// A database made read-only for its clients (default_transaction_read_only)
// still takes the other nodes' transactions, and the node's own
// transactions run at READ COMMITTED, which it is written for, whatever
// default_transaction_isolation says. ("\ " is a space inside one
// option.)
const Settings = "-c statement_timeout=0 -c lock_timeout=0 -c idle_in_transaction_session_timeout=0 -c idle_session_timeout=0" +
	` -c default_transaction_read_only=off -c default_transaction_isolation=read\ committed`

// Settings17 is added from PostgreSQL 17 on (15 and 16 refuse a
// connection that names a setting they do not have).
const Settings17 = " -c transaction_timeout=0"

// AppName is the application_name of the node's own connections, unless
// the connection string names one: pg_stat_activity tells them from the
// clients' sessions (which keep the name their client gives).
const AppName = "ordo"

// DSN returns dsn with Settings added to its options (for a server
// of version serverVersion, as server_version_num; 0 if not known), in
// the form dsn is written in (a URL, or keyword=value pairs, where a later
// keyword overrides an earlier one), so that pgx and libpq's tools read it
// alike.
func DSN(dsn string, serverVersion int) (string, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("postgres connection string: %w", err)
	}
	settings := Settings
	if serverVersion >= 170000 {
		settings += Settings17
	}
	opts := strings.TrimSpace(pc.RuntimeParams["options"] + " " + settings)
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("postgres connection string: %w", err)
		}
		q := u.Query()
		q.Set("options", opts)
		if q.Get("application_name") == "" {
			q.Set("application_name", AppName)
		}
		// Spaces as %20: libpq (pg_dump, pg_restore in joins) does not
		// read a '+' as one (a literal '+' is %2B in q.Encode()).
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		return u.String(), nil
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(opts)
	out := strings.TrimSpace(dsn) + " options='" + quoted + "'"
	if pc.RuntimeParams["application_name"] == "" {
		out += " application_name=" + AppName
	}
	return out, nil
}
