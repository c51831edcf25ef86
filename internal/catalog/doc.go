// Package catalog is the analyzer's view of a PostgreSQL database's schema:
// tables with their columns, primary keys and configured granule column,
// views resolved (recursively) to the base tables they read, and functions
// with their volatility. Names are always schema-qualified and resolved
// with a session's search_path; OIDs never leave this package's SQL.
//
// Files:
//   - catalog.go: Catalog (an immutable snapshot), Description (its plain,
//     JSON-able form, used for fixed test catalogs), name resolution.
//   - load.go: Load, which reads a Description from a live PostgreSQL.
//   - cache.go: Cache, the current snapshot, swapped atomically by Refresh
//     (called after DDL).
//
// Goroutines: none are started. A *Catalog is immutable and safe for
// concurrent use; Cache.Current is safe from any goroutine, Refresh may run
// concurrently with readers.
//
// This package must never write to the database, never cache OIDs in a
// Catalog, and never guess: a relation or function it does not know is
// reported as unknown, and the analyzer escalates.
package catalog
