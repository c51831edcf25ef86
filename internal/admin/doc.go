// Package admin is a node's admin API, the one ordoctl speaks to, and the
// readiness check of its metrics address. It reads the node's components
// and asks them for the few things an operator may ask (a schema check);
// it holds no replication logic of its own.
//
// The API is HTTP with JSON bodies (api.go names every path and type):
//
//	GET  /v1/status        Status: the node, its Raft view, members, counts
//	GET  /v1/protocol      Protocol: the termination protocol in force
//	GET  /v1/schema        SchemaStatus: the latest schema comparisons
//	POST /v1/schema/check  SchemaCheck: every node fingerprints at one seqno
//
// and, on the metrics address, unauthenticated:
//
//	GET  /readyz           200 when the node can commit, 503 and why if not
//
// Files:
//   - api.go: paths and the JSON types, shared by the server and Client.
//   - interfaces.go: Order and Replica, what the API reads of the total
//     order and the delivery engine.
//   - server.go: Server, the handlers behind authentication.
//   - auth.go: Auth: mutual TLS (client certificates of the peer CA) or a
//     bearer token (static, from a file reloaded on change, or generated
//     into the data directory by LoadOrCreateToken).
//   - addr.go: DataDir/admin.addr, where a node records the address its
//     API listens on (the default admin_listen picks a free port).
//   - ready.go: Readiness, the rule for /readyz and Status.Ready.
//   - client.go: Client, the Go client ordoctl and the tests use, with
//     ErrUnreachable and ErrUnauthenticated.
//   - members.go: the member endpoints (list, add as a learner, remove)
//     and the state transfer's snapshot lease (POST /v1/transfer: held
//     open, one request goroutine, until the joiner hangs up or Shutdown).
//
// Goroutines: none of its own beyond net/http's, one per connection;
// Server.Serve runs in its caller's goroutine until Shutdown. Readiness is
// safe for concurrent use and runs at most one check at a time.
//
// Never: answer a request that is not authenticated (there is no anonymous
// mode: the node's configuration refuses one off loopback, and on loopback
// a token is generated); compare tokens in variable time; log a token;
// block a handler longer than its bounded context; change replicated state
// except by proposing through the total order.
package admin
