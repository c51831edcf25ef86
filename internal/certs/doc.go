// Package certs makes and loads the X.509 certificates of an Ordo cluster
// (standard library crypto only, ECDSA P-256 keys) and keeps a running
// node's peer TLS material and client certificate current.
//
// Files:
//   - authority.go: Authority, a CA's certificate and key: NewAuthority,
//     IssueNode (a node certificate naming its node id), IssueClient,
//     IssueServer (the client port's certificate: server auth only).
//   - identity.go: how a certificate names a node: the URI SAN
//     ordo://node/<id> (NodeURI), with CN node-<id> for people; NodeID
//     reads it back.
//   - files.go: CreateCA, CreateNode, CreateClient, CreateServer, what
//     `ordo cert` runs: they write PEM files into a directory, keys with
//     mode 0600, and never replace an existing file unless told to.
//   - peer.go: Peer, a node's peer TLS: its own certificate and the CA pool
//     peers are verified against, read from files, reloaded when the files
//     change (Watch) or when asked (Reload, on SIGHUP), and the server and
//     client tls.Configs that read the current material at every handshake.
//   - server.go: ServerCert, the certificate of the client port, read from
//     files and reloaded like Peer's, and the tls.Config that serves the
//     current one at every handshake.
//   - reload.go: watched, the one mechanism both use: read a set of
//     files, load them whole or keep the previous material, log each
//     change and each new failure once.
//   - admin.go: the TLS of the admin API: the node's side
//     (Peer.AdminServerConfig: client certificates of the CA, node id not
//     required) and ordoctl's (AdminClientConfig: the server must name a
//     node id).
//
// Goroutines: none of its own; Watch runs in its caller's goroutine until
// its context ends. Peer and ServerCert are safe for concurrent use: handshakes read the
// current material through an atomic pointer while a reload replaces it.
//
// Never: writes a private key readable by anyone but its owner; replaces an
// existing file without Options.Overwrite; accepts a peer certificate that
// does not chain to the current CA pool or names no node id; swaps in
// material that does not load whole (a certificate that does not match its
// key, is not signed by the CA, has expired or names another node id leaves
// the previous material in place).
package certs
