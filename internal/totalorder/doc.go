// Package totalorder is Ordo's group total-order service: one etcd Raft
// group (go.etcd.io/raft/v3) whose members are the cluster's nodes. It
// decides the one order in which every node delivers update transactions.
//
// # API
//
//	n, err := totalorder.Start(cfg)          // open storage, start transport and raft
//	seq, err := n.Propose(ctx, payload)      // committed and delivered locally, or an error
//	for d := range n.Deliveries() { ... }    // committed entries in log order, same on every node
//	n.MarkApplied(seq)                       // the consumer durably applied everything <= seq
//	idx, err := n.ReadIndex(ctx)             // linearizable read index
//	n.AddLearner(ctx, id, addr) / n.Promote(ctx, id) / n.AddNode(ctx, id, addr) / n.RemoveNode(ctx, id)
//	n.MemberInfos()                          // members, learner or voter, peer address
//	n.Leader(), n.Members(), n.Status(), n.Delivered(), n.PeersApplied() // what operators see (internal/admin)
//	n.Stop()                                 // waits for every goroutine
//
// Seqnos are Raft log indexes. Deliveries carry only proposed payloads: a new
// leader's empty entry, configuration changes and proposals that reached a
// leader of a later term than they were made for occupy seqnos but are never
// delivered, so seqnos increase strictly with gaps, and the gaps are the
// same on every node. Config.StartAfter is the applied prefix the consumer's
// database proves: the node delivers exactly the entries after it, once each.
// If the node's log no longer holds those entries (it was wiped and re-added,
// or joined late) the stream starts with a DeliverySnapshot whose Data is
// what Config.SnapshotData returned on the node that made the snapshot; the
// consumer installs that state (state transfer) or gives up.
//
// Errors: ErrNoQuorum (not committed within Config.ProposeTimeout: minority
// partition, no leader, a lost message; the entry may still commit later
// and is then delivered), ctx.Err(), ErrStopped, ErrRemoved, ErrTooLarge.
//
// Retries are exactly-once: Propose proposes again when raft refused the
// proposal (no leader yet), and when a leader change lost it. The latter is
// decided deterministically from the log (envelope.go): an entry is only
// delivered if it was appended in the term it was proposed for, so once a
// newer term's entry is applied without the proposal having been delivered,
// it never will be, and proposing it again cannot deliver it twice. A
// follower's proposal that its transport dropped before sending it to the
// leader (no stream to the leader yet: the leader restarted, or the
// follower's reconnect is waiting out its backoff) is proposed again too
// (transport.ProposalReporter): no node can hold it. A forwarded proposal
// lost in flight in a term that goes on is not detected and ends in
// ErrNoQuorum.
//
// Configuration changes (AddLearner, Promote, AddNode, RemoveNode) are
// proposed again, every two election timeouts, until the configuration
// this node applied has them: raft silently turns a change proposed while
// another is pending into an empty entry. A change that takes effect twice
// is the same change.
//
// Flow control: at most Config.MaxInflight proposals per node wait for their
// commit; more Propose calls block (bounded by their ctx and the timeout).
// Proposals waiting together are handed to raft in one step, so they share
// Raft messages and one fsync per node (group commit).
//
// # Layers and files
//
//   - node.go: Node, the public API, proposal waiters, transport.Handler.
//   - loop.go: the three goroutines that drive raft (a RawNode with
//     AsyncStorageWrites); the contract they follow is written out at the
//     top of the file.
//   - envelope.go: every payload is logged as (term, origin node, local
//     proposal id, payload), so the origin matches the committed entry to
//     its waiting Propose and can retry safely; consumers never see the
//     envelope.
//   - check.go: what a peer's message is checked for beyond the
//     transport's checks (entries this package can apply; a heartbeat
//     may not commit past the end of the log), refused before raft, which
//     panics on such input. FuzzPeerMessages (fuzz_test.go) steps
//     arbitrary messages into a running node.
//   - members.go: members.json, the agreed membership kept beside the log.
//   - config.go, errors.go, metrics.go.
//   - storage/: the durable log, hard state and snapshots (see below).
//   - transport/: the Transport interface and its gRPC implementation
//     (proto/ordo/v1/raft.proto; one long-lived client stream per peer
//     direction carrying batches of marshalled raftpb.Messages; optional
//     mutual TLS, each connection bound to the node id its certificate
//     proves).
//   - faults/: a Transport wrapper injecting delay, drop, duplicate and
//     partition per link, for tests and benchmarks.
//
// # Goroutines
//
//   - run (the raft goroutine) owns the raft.RawNode: ticks, steps received
//     messages, takes proposals (all that are waiting, in one go), runs
//     control requests, and routes each Ready's messages. It does no I/O.
//   - runAppend owns writes to the log: it batches MsgStorageAppend
//     messages, fsyncs once per batch, then releases the messages that
//     depended on the write (votes, append acknowledgements).
//   - runApply owns the applied index and the delivery channel: it applies
//     committed entries in order, resolves Propose and conf change waiters,
//     and takes snapshots/compacts.
//   - the transport's server and per-peer senders (transport.GRPC).
//
// Propose, ReadIndex, AddNode and RemoveNode callers block in their own
// goroutines on channels these goroutines fill, bounded by their ctx and
// Config.ProposeTimeout. Stop closes the node, waits for all three
// goroutines and the transport, closes the storage and then the delivery
// channel.
//
// # Storage choice
//
// The log is the package's own segmented append-only file (storage/): one
// record per Ready (hard state + entries) framed by a length, a CRC-32C of
// the length and a CRC-32C of the payload, written with one write and one
// fdatasync before any message that depends on it is sent. Snapshots are
// separate files (write, fsync, rename, fsync directory). We did not take
// etcd's wal/snap packages because they come only with
// go.etcd.io/etcd/server/v3, whose dependency tree (zap, otel, bbolt,
// grpc-gateway, its own grpc pin) is far heavier than the 400 lines needed
// here; bbolt (already a dependency) rewrites B+tree pages and its meta page
// on each commit (two fsyncs), which costs latency on the hot path for an
// append-only workload. Recovery rules (which tails are repaired, what is
// ErrCorrupt) are documented on storage.Open and tested with a table of
// corruptions.
//
// # Snapshots and compaction
//
// Consumer state lives in PostgreSQL, not here. Every node reports the index
// its consumer marked applied (MarkApplied) to its peers in every transport
// batch. A node snapshots and compacts its log up to the smallest index that
// it and every current member have marked, once that is
// Config.SnapshotEntries past the previous snapshot. A member that is down
// therefore holds compaction back (its peers' logs grow) but never needs a
// snapshot when it returns, unless Config.RetainEntries is set and it fell
// further behind than that (its peers then compact past it); otherwise only
// a node that joins with an empty log after compaction (re-added after a
// wipe) is caught up by snapshot. A snapshot
// holds the index, term, configuration and Config.SnapshotData's bytes.
//
// # Never
//
// The package never sends a message before the state it depends on is
// fsynced (raft's async-storage contract: a leader replicates entries while
// it writes them, and counts its own vote for them only once they are
// durable), never delivers an entry twice or out of order within one run,
// never delivers an entry at or below StartAfter, and never acknowledges a
// proposal before it is committed and handed to the local delivery stream.
// It does not deduplicate payloads: a payload proposed twice (a caller's
// retry after ErrNoQuorum) is delivered twice, and the fault injector
// never duplicates proposals (MsgProp) for that reason.
//
// # Known limits
//
//   - The agreed membership (every member's address, the removed ids) is
//     kept in members.json beside the log (members.go), rewritten on every
//     conf change, so it outlives compaction and Config.Peers is only the
//     bootstrap set. A node caught up by a Raft snapshot learns the
//     members' ids from it but not the addresses of members added before
//     the snapshot, unless its Config.Peers names them.
//   - A member that stays down holds back compaction on every node, unless
//     Config.RetainEntries bounds how far behind it may be.
package totalorder
