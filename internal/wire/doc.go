// Package wire is Ordo's front door: a PostgreSQL wire-protocol (v3) proxy
// that accepts clients on the node's port and relays each client session to
// the node's local PostgreSQL over a backend connection of its own (one
// backend connection per session, no pooling).
//
// Layers, in the order a connection meets them:
//
//  1. Server (server.go) accepts connections, enforces MaxConns and, for
//     connections not yet authenticated, MaxStartupConns and
//     MaxStartupConnsPerSource (refused at once with FATAL 53300), keeps
//     the table of cancel keys, and shuts down gracefully.
//  2. Startup (startup.go) handles SSLRequest (TLS terminates here) and
//     GSSENCRequest (refused), each at most once, protocol version
//     negotiation, CancelRequest, then connects to PostgreSQL and relays
//     the authentication exchange (trust, password, md5, SCRAM-SHA-256
//     without channel binding) until PostgreSQL's first ReadyForQuery.
//     All of it within StartupTimeout (then FATAL 57014), with a startup
//     packet of at most MaxStartupPacketLen and client messages of at most
//     64 KiB until authenticated. The client gets its own BackendKeyData;
//     the backend's stays here.
//  3. The session (session.go) relays messages in both directions with
//     pgproto3 (Backend toward the client, Frontend toward PostgreSQL),
//     tracking transaction status, outstanding sync points and COPY mode,
//     and calls the session hooks (hooks.go, exec.go).
//
// Files: config.go (Config and defaults), errors.go (the SQLSTATEs the proxy
// itself reports and the conversion of hook errors to ErrorResponse, done
// only here, at the wire edge), metrics.go (ordo_wire_* metrics), hooks.go
// (the Hooks/SessionHooks/Backend contract), exec.go (Backend.Exec).
//
// Goroutines: Serve runs the accept loop on the caller's goroutine. Each
// connection has a session goroutine (startup, then reading the client and
// writing PostgreSQL; it calls Hooks.NewSession and SessionHooks.Statement
// and Close) and, once established, a backend goroutine (reading PostgreSQL
// and writing the client; it may call SessionHooks.ReadyForQuery). Each
// direction flushes its buffered output right before it blocks reading, so
// nothing sits in a buffer while its reader sleeps. Both goroutines are
// tracked by the Server's WaitGroup; Shutdown waits for them.
//
// Bounded memory: messages are streamed one at a time; a direction writes
// as soon as 32 KiB are pending, so a huge result or COPY never accumulates.
// A single client message is limited to Config.MaxMessageLen.
//
// Fuzzing: FuzzStartup (a client's first bytes, through a stand-in
// PostgreSQL) and FuzzClientMessages (after startup, through PostgreSQL);
// limits_test.go tests each limit on real sockets.
//
// This package must never know about replication (that is the session
// layer, plugged in through Hooks), must never send a client's messages to
// PostgreSQL before PostgreSQL has authenticated it, must never read bytes a
// client sent after SSLRequest before the TLS handshake, and must never let
// one client's bad input affect another session.
package wire
