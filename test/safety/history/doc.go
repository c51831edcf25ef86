// Package history records what the clients and the nemesis of a safety run
// did, as JSON lines (one event a line), Jepsen style: every operation is an
// invoke event followed by exactly one completion event of the same process:
// ok (it took effect), fail (it certainly did not) or info (indeterminate:
// the connection was lost mid-commit, 08007, a timeout). Nemesis actions are
// info events of process -1. After the run, the outcome check answers
// for indeterminate operations that labelled their transaction: resolve
// events of process -2, which Pair applies.
//
// The Recorder is safe for concurrent use; events are written in the order
// they are recorded, so a completion always follows its invocation.
//
// Files: history.go (Event, Op, Recorder, Load, Pair). The Recorder's
// mutex serializes every write; nothing here starts a goroutine.
package history
