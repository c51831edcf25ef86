// Package proccluster runs a cluster of real `ordo start` processes over
// real PostgreSQL servers (internal/pglocal) for the process-level tests
// (test/safety): it builds cmd/ordo, writes each node's YAML configuration,
// starts, kills (SIGKILL) and restarts processes, and routes every node's
// peer traffic through userspace TCP proxies so links can be cut and
// restored (partitions).
//
// Files:
//   - cluster.go: Cluster: build, configure, start, kill, restart, pause
//     (SIGSTOP) and resume, crash and restart a node's PostgreSQL, find the
//     Raft leader (from /metrics), DSNs.
//   - netproxy.go: Link, a TCP proxy for one directed peer link, and the
//     partition helpers on Cluster (Isolate, IsolateAll, Cut, CutLink, Heal).
//
// Every node's `peers:` map names, for each other node j, the address of the
// proxy of link i→j (127.0.0.1 only), which forwards to j's peer_listen.
// Cutting a link closes its open connections and refuses new ones until it
// is restored.
//
// Goroutines: one accept loop per link and two copy goroutines per proxied
// connection, all ended by Cluster.Stop; one reader of each process' stdout
// until the process exits. Nothing here calls testing.T: every failure is
// an error, so a command (make safety) can use it as well as a test.
//
// test/e2e/crash_test.go has a similar, smaller harness of its own (a test
// package cannot be imported); the two should become one.
package proccluster
