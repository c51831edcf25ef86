// Package safety is Ordo's Jepsen-style safety suite: it runs real `ordo
// start` processes over real PostgreSQL servers (test/internal/proccluster),
// drives workloads through every node while a nemesis injects faults,
// records every operation to a history (test/safety/history), and checks the
// history and the final state of every node (test/safety/checker).
//
// Files:
//   - run.go: Config and Run: one run from cluster start to report.
//   - client.go: a client (one connection to one node) and how an error
//     becomes an outcome (ok / fail / info).
//   - workloads.go: bank, append (list-append), wskew (the write-skew
//     control) and sets: their schema, operations, final reads and checks;
//     workload_hot.go, workload_longfork.go, workload_ddl.go: hot keys,
//     long-fork registers and schema migrations.
//   - nemesis.go: the faults (kill, partition, backend-kill, pause,
//     postmaster-kill, kill-all, partition-leader, partition-ring,
//     partition-all) and the supervisor that restarts any ordo process
//     that exited.
//   - resolve.go: the outcome check of indeterminate operations.
//   - report.go, plot.go: the run report and latency.svg beside the
//     history.
//
// safety_test.go holds the short run of the default suite (every workload
// under each protocol with the kill and partition nemeses) and the full
// matrix behind `make safety`. docs/safety.md says how to read a report.
//
// Goroutines: Run starts the clients of each workload, the nemesis and the
// supervisor, and waits for all of them before it checks anything.
package safety
