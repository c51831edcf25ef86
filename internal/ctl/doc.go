// Package ctl is ordoctl, the operator's tool: its cobra commands, how they
// reach the nodes' admin APIs (internal/admin's Client), how they print
// (table, json, yaml) and the exit codes scripts rely on. cmd/ordoctl only
// calls Main.
//
// Files:
//   - root.go: Main, the root command and its global flags (endpoints,
//     credentials, output), usage errors and exit codes.
//   - output.go: json, yaml and table rendering.
//   - status.go: `ordoctl status`.
//   - protocol.go: `ordoctl protocol show`.
//   - schema.go: `ordoctl schema-check`.
//
// Exit codes (ExitOK …): 0 everything asked was done and every check
// passed; 1 a check failed (a node not ready or refusing updates, schemas
// or protocols that differ) or a node could not do what was asked; 2 a
// usage error (unknown command or flag, conflicting credentials, a bad
// output format); 3 a node could not be reached, or refused the
// credentials.
//
// Goroutines: a command queries its endpoints concurrently and waits for
// every answer (each bounded by --request-timeout) before it prints.
//
// Never: print a token; change anything but through the admin API; exit 0
// when a node it was asked about did not answer.
package ctl
