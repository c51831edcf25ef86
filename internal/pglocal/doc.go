// Package pglocal starts and stops real PostgreSQL servers on this machine.
//
// It is the one way Ordo's tests, benchmarks and `ordo demo` get a database:
// N servers, each in its own data directory, listening on a loopback port,
// configured for what replication needs (wal_level=logical, prepared
// transactions, replication slots and WAL senders) and with a SCRAM password
// superuser.
//
// Files:
//   - binaries.go: finding the PostgreSQL server binaries ($ORDO_PG_BIN,
//     pg_config, /usr/lib/postgresql/*/bin, PATH), their Version, and
//     explaining what to install.
//   - user.go: when running as root, the unprivileged OS user the servers run
//     as (PostgreSQL refuses root); created if missing.
//   - server.go: one server: initdb, configuration, start, readiness, stop.
//   - cluster.go: Start and Stop of N servers in parallel; Cluster.Version
//     tells tests which server they run on.
//   - pgversion/: a command printing the binaries and version Start would
//     use (`make test` prints it before each run).
//
// Goroutines: Start runs one goroutine per server while starting and waits
// for all of them; each running server has one goroutine waiting on its
// process, owned by the Server and finished by Stop.
//
// Servers are started with a parent-death signal, so a test binary that
// panics or is killed does not leave postmasters behind.
//
// This package must never be used to talk SQL on behalf of Ordo: it only
// manages server processes. It must never run PostgreSQL as root.
package pglocal
