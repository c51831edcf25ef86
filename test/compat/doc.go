// Package compat holds compatibility tests: real PostgreSQL clients (psql,
// pgbench, pgx, pgjdbc, psycopg 3) run the same sessions directly against
// PostgreSQL and through the Ordo wire proxy (internal/wire), and the tests
// require the same results.
//
// Files: main_test.go (one PostgreSQL server from internal/pglocal, one
// in-process proxy with TLS, a fresh database per client run), and one file
// per client. Clients that are not Go programs or Debian packages (pgjdbc
// from Maven Central, psycopg from PyPI) are installed by the test itself
// into a cache directory ($ORDO_COMPAT_CACHE, default
// $XDG_CACHE_HOME/ordo-compat); a failed install fails the test.
//
// This package has no non-test code and must never skip a client silently.
package compat
