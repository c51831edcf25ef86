package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// No poison entries (DESIGN.md "When things go wrong"). A node that cannot
// carry out a committed entry of another node (a DDL replay that fails,
// say, because of an object created on it behind Ordo's back) does not
// stop at once: it reports the failure through the order (a VoteEntry) and
// waits, holding what is delivered after. Every node that carried the
// entry out answers with a success. The tally (termination.Votes) is a
// function of the delivered votes, so every node reaches the same verdict:
//
//   - Applied (the nodes that carried it out have a majority): the failing
//     nodes leave (they stop refusing nothing silently: they refuse
//     updates and need a state transfer);
//   - Skipped (the failing nodes have a majority): they treat the entry as
//     carried out without it and go on serving; the nodes that applied it
//     leave, and if its origin is among them, the transaction its client
//     was told committed is lost with them: said loudly in the log.
//
// One bad entry never stops a majority. Votes are taken on every remote
// transaction a node cannot carry out in a way PostgreSQL would repeat
// (votable): entries with DDL or fragments, carried out on their own, and
// plain row applies, which a failed run applies again one at a time to
// find the one to vote on (flushVoting). A node waiting for a verdict
// reads ahead from the order and holds what it reads (Replica.held): the
// loop delivers it before anything else.

// applyFailure is an entry this node could not carry out, with the
// deliveries of its batch after it (not yet stepped).
type applyFailure struct {
	seqno  uint64
	gid    txn.GID
	origin uint32
	err    error
	rest   []totalorder.Delivery
	// resume carries out what remains of the step after the failed
	// decision (nil: nothing).
	resume func(ctx context.Context) error
}

func (f *applyFailure) Error() string {
	return fmt.Sprintf("replica: entry %d could not be carried out here: %v", f.seqno, f.err)
}

func (f *applyFailure) Unwrap() error { return f.err }

// deterministic reports whether err is PostgreSQL refusing the statement
// itself (it would refuse it again), not a lost connection, a restart or
// a lack of resources.
func deterministic(err error) bool {
	if errors.Is(err, apply.ErrPostgresRestarted) || errors.Is(err, termination.ErrPostgresRestarted) {
		return false
	}
	if errors.Is(err, apply.ErrDiverged) {
		return true // a row that is not there, or is there twice
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "08", "53", "57", "58", "XX", "40", "55":
		return false // connection, resources, shutdown, system, serialization, lock timeouts
	}
	return true
}

// votable reports whether a failure to carry out a remote transaction
// goes to the cluster's vote rather than stopping the node.
func (r *Replica) votable(err error) bool {
	return r.cfg.Members > 0 && deterministic(err)
}

// vote reports f through the order and, once the cluster's verdict is in,
// carries on from f's entry if the failing side won, or returns an error
// (this node leaves) if it lost.
func (r *Replica) vote(ctx context.Context, f *applyFailure) error {
	r.tail = f.rest // delivered, not stepped yet: votes may be among them
	defer func() { r.tail = nil }()
	if err := r.awaitVerdict(ctx, f.seqno, f.gid, f.origin, f.err); err != nil {
		return err
	}
	r.publish(f.seqno)
	if f.resume != nil {
		if err := f.resume(ctx); err != nil {
			var next *applyFailure
			if errors.As(err, &next) {
				next.rest = append(next.rest, f.rest...)
			}
			return err
		}
	}
	return r.deliverBatch(ctx, f.rest)
}

// maxHeldBytes bounds what a node waiting for a verdict holds of what it
// reads ahead. Beyond it, it only counts (votes and members); if it then
// goes on, it stops for a restart, which replays the rest from the log.
var maxHeldBytes = 256 << 20

// voteReport is how often a node waiting for a verdict says so in its log.
var voteReport = 30 * time.Second

// errLeaves marks the end of a node whose database no longer matches the
// cluster's, or may not: the vote on an entry went against it, or never
// came.
var errLeaves = errors.New("replica")

// errReplay is returned by awaitVerdict when this node skipped the entry
// but did not hold everything it read while waiting.
var errReplay = errors.New("replica: restart this node to replay the entries read while the cluster voted")

// awaitVerdict reports that this node could not carry out the entry at
// seqno (transaction gid; cause) and waits for the cluster's verdict. It
// counts the votes among what was delivered but not stepped yet
// (Replica.tail, then Replica.held), then holds what the order delivers
// meanwhile (Replica.held, up to maxHeldBytes). It returns nil when the
// entry is skipped by every node (recorded in a proof row of its own, so
// a restart replays it as skipped), or the error that makes this node
// leave.
//
// What it reads ahead is tallied apart from Replica.votes, which counts
// only what the loop steps, in log order: a membership change read ahead
// must not count for the votes on other entries stepped before it (every
// other node counts those under the members before the change).
func (r *Replica) awaitVerdict(ctx context.Context, seqno uint64, gid txn.GID, origin uint32, cause error) error {
	r.log.Error("an entry could not be carried out here; the cluster votes", "seqno", seqno, "origin", origin, "err", cause)
	r.m.votes.WithLabelValues("fail").Inc()
	r.proposeVote(seqno, origin, false, cause.Error())
	ahead := termination.NewVotes(r.votes.Members())
	held, dropped := 0, 0
	for _, ds := range [][]totalorder.Delivery{r.tail, r.held} {
		for _, d := range ds {
			countAhead(ahead, d, seqno)
			held += len(d.Data)
		}
	}
	deadline := time.NewTimer(r.cfg.VoteTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(voteReport)
	defer tick.Stop()
	began := time.Now()
	for {
		switch ahead.Verdict(seqno) {
		case termination.Applied:
			return fmt.Errorf("%w: the cluster carried out entry %d, which this node could not (%w); it leaves the cluster and needs a state transfer: %s", errLeaves, seqno, cause, r.rejoinSteps())
		case termination.Skipped:
			r.log.Warn("the cluster voted to skip an entry most nodes could not carry out; this node goes on without it", "seqno", seqno, "origin", origin)
			r.skipped[seqno] = true
			r.proofs = append(r.proofs, proof{seqno: seqno, gid: skippedPrefix + gid})
			if dropped > 0 {
				// The skip's proof row is written first: the restart
				// replays the entry as skipped and steps what follows.
				if err := r.flushProofs(ctx); err != nil {
					return err
				}
				return fmt.Errorf("%w (entry %d skipped by the cluster's vote; %d deliveries read while waiting were beyond the %d MiB it holds)", errReplay, seqno, dropped, maxHeldBytes>>20)
			}
			return nil
		}
		var d totalorder.Delivery
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			okN, badN := ahead.Count(seqno)
			r.log.Warn("still waiting for the cluster's verdict on an entry this node could not carry out: voters needed for a majority have not voted (down or cut off?)",
				"seqno", seqno, "carried_out", okN, "failed", badN, "voters", ahead.Members(), "waited", time.Since(began).Round(time.Second), "vote_timeout", r.cfg.VoteTimeout)
			continue
		case <-deadline.C:
			okN, badN := ahead.Count(seqno)
			return fmt.Errorf("%w: no verdict on entry %d within vote_timeout (%s): %d of %d voters carried it out, %d (this node included) could not, "+
				"the others did not vote; this node could not carry it out (%w), so it leaves the cluster and needs a state transfer: %s",
				errLeaves, seqno, r.cfg.VoteTimeout, okN, ahead.Members(), badN, cause, r.rejoinSteps())
		case d, ok = <-r.cfg.Order.Deliveries():
			if !ok {
				return fmt.Errorf("replica: the total order stopped while the cluster voted on entry %d", seqno)
			}
		}
		countAhead(ahead, d, seqno)
		if held += len(d.Data); held > maxHeldBytes {
			if dropped == 0 {
				r.log.Warn("still waiting for the cluster's verdict; no longer holding what the order delivers (the node will restart to replay it)", "seqno", seqno, "held_bytes", held-len(d.Data))
			}
			dropped++
			continue
		}
		r.held = append(r.held, d)
	}
}

// countAhead counts d, delivered but not stepped yet, toward the verdict
// on seqno in tally: a vote on it, or the voters from a membership change
// (in log order, as the nodes that do not wait count them).
func countAhead(tally *termination.Votes, d totalorder.Delivery, seqno uint64) {
	if d.Type == totalorder.DeliveryMembers {
		tally.SetMembers(len(totalorder.Voters(d.Data)))
		return
	}
	var e ordov1.Entry
	if d.Type == totalorder.DeliveryEntry && proto.Unmarshal(d.Data, &e) == nil {
		if v := e.GetVote(); v != nil && v.AtSeqno == seqno {
			tally.Add(v.AtSeqno, v.Origin, v.Node, v.Ok)
		}
	}
}

// deliverVote counts a vote delivered in the normal course of the loop
// (this node is not waiting for a verdict on it): a node that carried the
// entry out answers a failure, and leaves if the failing side wins.
func (r *Replica) deliverVote(v *ordov1.VoteEntry) error {
	before := r.votes.Verdict(v.AtSeqno)
	verdict := r.votes.Add(v.AtSeqno, v.Origin, v.Node, v.Ok)
	applied := !r.skipped[v.AtSeqno] // this node is past the entry: it carried it out, or skipped it by a verdict
	if !v.Ok && v.Node != r.cfg.NodeID && applied && verdict == termination.Undecided && !r.votes.Voted(v.AtSeqno, r.cfg.NodeID) {
		r.m.votes.WithLabelValues("ok").Inc()
		r.proposeVote(v.AtSeqno, v.Origin, true, "")
	}
	if before == termination.Undecided {
		return r.afterVerdict(v.AtSeqno, v.Origin, verdict)
	}
	return nil
}

// deliverMembers counts the voters from a membership change delivered in
// the normal course of the loop: polls it decides (a voter removed before
// it voted) are acted on as a vote deciding them would be.
func (r *Replica) deliverMembers(voters int) error {
	for _, d := range r.votes.SetMembers(voters) {
		if err := r.afterVerdict(d.Seqno, d.Origin, d.Verdict); err != nil {
			return err
		}
	}
	return nil
}

// afterVerdict acts on a verdict just reached on an entry this node is
// past: if the failing side won and this node carried the entry out, it
// leaves.
func (r *Replica) afterVerdict(seqno uint64, origin uint32, verdict termination.Verdict) error {
	if verdict != termination.Skipped || r.skipped[seqno] {
		return nil
	}
	lost := ""
	if origin == r.cfg.NodeID {
		lost = "; this node is the entry's origin: the transaction its client was told committed is lost with it"
	}
	r.log.Error("the cluster voted to skip an entry this node carried out: it leaves the cluster"+lost, "seqno", seqno, "origin", origin)
	return fmt.Errorf("%w: the cluster skipped entry %d, which this node carried out (most nodes could not); it leaves the cluster and needs a state transfer%s: %s", errLeaves, seqno, lost, r.rejoinSteps())
}

// proposeVote sends this node's vote on the entry at seqno.
func (r *Replica) proposeVote(seqno uint64, origin uint32, ok bool, reason string) {
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Vote{Vote: &ordov1.VoteEntry{AtSeqno: seqno, Node: r.cfg.NodeID, Ok: ok, Origin: origin, Reason: reason}}})
	if err != nil {
		r.log.Error("encode vote", "err", err)
		return
	}
	r.proposeInBackground(payload, untilTaken, fmt.Sprintf("a vote on entry %d", seqno), func(err error) {
		r.log.Error("could not send this node's vote", "seqno", seqno, "err", err)
	})
}

// rejoinSteps says how to bring back a node a vote sent away.
func (r *Replica) rejoinSteps() string {
	return "stop it and run 'ordo join --config NODE.yaml --from ADMIN_ADDRESS_OF_ANOTHER_MEMBER --rejoin': its database is replaced by a copy of the other's, and it rejoins under its own id (docs/membership.md)"
}
