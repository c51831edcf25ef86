package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// maxBatch bounds the deliveries the loop takes at once.
const maxBatch = 64

// Run is the delivery loop. It returns when ctx ends or the order's
// delivery channel closes, after the background proposals finish.
//
// It takes every delivery already waiting (up to maxBatch) at once and
// carries them out in order, except that consecutive remote transactions
// without DDL are applied together (apply.ApplyBatch: in parallel where
// their rows do not overlap, committed in seqno order). The applied prefix
// moves past an entry only once it and every entry before it are decided
// and carried out.
func (r *Replica) Run(parent context.Context) error {
	defer r.waitBackground()
	defer r.stopWaiting()
	// watchPostgres stops the loop with its cause when PostgreSQL lost
	// acknowledged commits; the parent's end is a normal stop.
	ctx, stop := context.WithCancelCause(parent)
	defer stop(nil)
	stopped := func() error {
		if parent.Err() != nil {
			return nil
		}
		return context.Cause(ctx)
	}
	conn, err := r.connectLoop(ctx)
	if err != nil {
		return err
	}
	r.conn = conn
	if err := r.loadProven(ctx); err != nil {
		conn.Close(context.Background())
		return err
	}
	if err := r.loadRolledBack(ctx); err != nil {
		conn.Close(context.Background())
		return err
	}
	if err := r.loadClasses(ctx); err != nil {
		conn.Close(context.Background())
		return err
	}
	r.holdForLeftovers()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	r.bg.Add(2)
	go func() {
		defer r.bg.Done()
		r.sweep(sweepCtx)
	}()
	go func() {
		defer r.bg.Done()
		r.watchPostgres(sweepCtx, stop)
	}()
	defer stopSweep()
	gone := time.NewTicker(suspectEvery)
	defer gone.Stop()
	walCheck := time.NewTimer(walCheckEvery) // re-armed while seqnos wait for checkDurable
	defer walCheck.Stop()
	defer func() {
		r.closeFingerprints()
		r.conn.Close(context.Background())
		r.bfMu.Lock()
		if r.bfConn != nil {
			r.bfConn.Close(context.Background())
			r.bfConn = nil
		}
		r.bfMu.Unlock()
	}()
	for {
		var batch []totalorder.Delivery
		if len(r.held) > 0 {
			// Read ahead while the cluster voted (vote.go): they come
			// before anything still in the channel.
			n := min(len(r.held), maxBatch)
			batch, r.held = r.held[:n:n], r.held[n:]
			if len(r.held) == 0 {
				r.held = nil
			}
			if err := r.deliverHeld(ctx, batch); err != nil {
				if ctx.Err() != nil {
					return stopped()
				}
				r.fail(err)
				return err
			}
			if r.durablePending() {
				walCheck.Reset(walCheckEvery)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return stopped()
		case <-walCheck.C:
			// No batch for a while: what the last ones carried out still
			// becomes durable, so compaction is not held back.
			if r.durablePending() {
				r.checkDurable(ctx)
				walCheck.Reset(walCheckEvery)
			}
			continue
		case now := <-gone.C:
			r.abortGone(now)
			r.abortLeftoverBegun()
			continue
		case req := <-r.exportc:
			exp, err := r.export(req.ctx)
			req.res <- exportRes{exp: exp, err: err}
			continue
		case d, ok := <-r.cfg.Order.Deliveries():
			if !ok {
				return nil
			}
			batch = append(batch, d)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case d, ok := <-r.cfg.Order.Deliveries():
				if !ok {
					break drain
				}
				batch = append(batch, d)
			default:
				break drain
			}
		}
		r.m.queue.Set(float64(len(batch) + len(r.cfg.Order.Deliveries())))
		if err := r.deliverHeld(ctx, batch); err != nil {
			if ctx.Err() != nil {
				return stopped()
			}
			r.fail(err)
			return err
		}
		if r.durablePending() {
			walCheck.Reset(walCheckEvery)
		}
	}
}

// deliverHeld delivers a batch, and carries on through the votes on
// entries this node could not carry out.
func (r *Replica) deliverHeld(ctx context.Context, batch []totalorder.Delivery) error {
	err := r.deliverBatch(ctx, batch)
	var f *applyFailure
	for errors.As(err, &f) {
		err = r.vote(ctx, f) // carries on from the entry after, or not
	}
	return err
}

// run is a run of committed remote transactions without DDL or fragments,
// applied together (apply.ApplyBatch) before anything else is carried out.
type run struct {
	items   []apply.Item
	origins []uint32 // of each item, for a vote on one that fails
	last    uint64   // the prefix to publish once the run is applied
}

// deliverBatch steps the decider through deliveries in order and carries
// out its decisions, applying runs of remote transactions together.
func (r *Replica) deliverBatch(ctx context.Context, batch []totalorder.Delivery) error {
	var rn run
	defer func() { r.tail = nil }()
	for i, d := range batch {
		r.tail = batch[i:] // this one and the rest: not stepped yet
		if d.Type == totalorder.DeliveryMembers {
			// The voters from here on, the same on every node at this
			// position: votes on poison entries count them.
			if err := r.deliverMembers(len(totalorder.Voters(d.Data))); err != nil {
				return err
			}
			continue
		}
		if d.Type == totalorder.DeliverySnapshot {
			return r.tooFarBehind(d.Seqno)
		}
		var e ordov1.Entry
		if err := proto.Unmarshal(d.Data, &e); err != nil {
			return fmt.Errorf("replica: entry %d: %w", d.Seqno, err)
		}
		if fromNewerVersion(&e) {
			// Carrying it out without what this version does not know
			// (a new kind of entry, a new field) could diverge: stop.
			return fmt.Errorf("replica: entry %d holds fields this version of Ordo does not know: a newer node wrote it; upgrade this node", d.Seqno)
		}
		ent, err := r.decode(d.Seqno, &e)
		if err != nil {
			return err
		}
		var st termination.Step
		if sw, ok := r.switchAborts(&ent); ok {
			// Its protocol is no longer in force: aborted, on every node.
			st, err = r.dec.Step(&termination.Entry{Seqno: d.Seqno, Kind: termination.KindOther})
			st.Decisions = append(st.Decisions, sw)
		} else {
			st, err = r.dec.Step(&ent)
		}
		if err != nil {
			return fmt.Errorf("replica: %w", err)
		}
		for _, gid := range st.Expired {
			if fs := r.dropFragments(gid); fs != nil {
				r.log.Warn("fragments of a transaction whose end was never ordered are forgotten", "gid", gid, "first_seqno", fs.first, "fragments", len(fs.data))
			}
		}
		if st.Hold {
			r.holdFragment(d.Seqno, e.GetFragment(), d.Data)
		}
		for _, p := range st.Proposals {
			r.proposeOutcome(p)
		}
		if err := r.finishEntry(ctx, d, &e, st, 0, &rn); err != nil {
			var f *applyFailure
			if errors.As(err, &f) {
				f.rest = batch[i+1:]
			}
			return err
		}
	}
	r.tail = nil
	if err := r.flush(ctx, &rn); err != nil {
		return err
	}
	if err := r.flushProofs(ctx); err != nil {
		return err
	}
	r.recorded.Store(r.prefix.Load())
	r.mu.Lock()
	close(r.prefixCh)
	r.prefixCh = make(chan struct{})
	r.mu.Unlock()
	if len(batch) > 0 { // empty: the rest of a batch after a vote
		if err := r.trimProofs(ctx, batch[len(batch)-1].Seqno); err != nil {
			return err
		}
	}
	r.markDurable(ctx, r.dec.Settled())
	return nil
}

// finishEntry carries out what stepping the entry e, delivered as d, gave
// (from its decision from on): the decisions in order, the grants, the
// entry's own effects, then the applied prefix. When this node cannot
// carry out a decision others carried out, the applyFailure it returns can
// resume after it once the cluster voted to skip it (vote.go): a step may
// hold several decisions (pgr releases them in seqno order).
func (r *Replica) finishEntry(ctx context.Context, d totalorder.Delivery, e *ordov1.Entry, st termination.Step, from int, rn *run) error {
	for j := from; j < len(st.Decisions); j++ {
		if err := r.carryOut(ctx, d.Seqno, st.Decisions[j], rn); err != nil {
			var f *applyFailure
			if errors.As(err, &f) {
				f.resume = func(ctx context.Context) error {
					var rn run
					if err := r.finishEntry(ctx, d, e, st, j+1, &rn); err != nil {
						return err
					}
					return r.flush(ctx, &rn)
				}
			}
			return err
		}
		if r.toldUnseen {
			r.showTold(st.Decisions[j].Seqno, st.Decisions[j+1:])
		}
	}
	if len(st.Granted) > 0 {
		// The granted transactions' snapshots must hold every earlier
		// conflicting transaction: apply the run first.
		if err := r.flush(ctx, rn); err != nil {
			return err
		}
		for _, gid := range st.Granted {
			r.grant(gid)
		}
	}
	if a := e.GetAbort(); a != nil && a.Label != "" && d.Seqno > r.cfg.Proven {
		// Aborted by its origin, maybe before its entry ever reached
		// the order: recorded under its label (a commit ordered
		// earlier still shows as committed: its proof row wins).
		r.abortedLabels = append(r.abortedLabels, proof{d.Seqno, txn.GID(a.Gid), a.Label})
	}
	if err := r.deliverOther(ctx, d.Seqno, e, rn); err != nil {
		return err
	}
	if p := e.GetProtocol(); p != nil {
		if err := r.switchTo(ctx, d.Seqno, p, rn); err != nil {
			return err
		}
	}
	if settled := r.dec.Settled(); len(rn.items) > 0 {
		rn.last = settled // published with the run
	} else {
		r.publish(settled)
	}
	return nil
}

// decode turns the entry delivered at seqno into what the decider needs,
// and keeps a transaction's entry until it is decided.
func (r *Replica) decode(seqno uint64, e *ordov1.Entry) (termination.Entry, error) {
	ent := termination.Entry{Seqno: seqno}
	switch k := e.Kind.(type) {
	case *ordov1.Entry_Txn:
		t := k.Txn
		ent.Kind, ent.GID, ent.Origin, ent.Protocol = termination.KindTxn, txn.GID(t.Gid), t.Origin, t.Protocol
		ent.SnapshotSeqno, ent.Keys, ent.ReadAll, ent.Fragments = t.SnapshotSeqno, decodeKeys(t), t.ReadAll, t.Fragments
		ent.BeginSeqno, ent.Serializable = t.BeginSeqno, t.Serializable
		ent.GranuleSeqno, ent.GranulesInForce = t.GranuleSeqno, classes.GranuleSeqnoAt(r.Classes(), seqno)
		if t.Origin == r.cfg.NodeID {
			ent.Local = r.localOf(ent.GID)
		}
		if decided, commit := r.replayed(seqno); decided {
			ent.Replayed = termination.ReplayAbort
			if commit {
				ent.Replayed = termination.ReplayCommit
			}
		}
		r.pending[seqno] = t
	case *ordov1.Entry_Abort:
		ent.Kind, ent.GID = termination.KindAbort, txn.GID(k.Abort.Gid)
	case *ordov1.Entry_Fragment:
		ent.Kind, ent.GID, ent.Index = termination.KindFragment, txn.GID(k.Fragment.Gid), k.Fragment.Index
	case *ordov1.Entry_Begin:
		b := k.Begin
		ent.Kind, ent.GID, ent.Origin = termination.KindBegin, txn.GID(b.Gid), b.Origin
		for _, c := range b.Classes {
			ent.Classes = append(ent.Classes, txn.ClassRef{Name: c.Name, Label: c.Label, Value: c.Value})
		}
		if r.loopProtocol == CONS {
			r.begun[ent.GID] = b.Origin
		}
	case *ordov1.Entry_Outcome:
		o := k.Outcome
		ent.Kind, ent.GID, ent.TxnSeqno = termination.KindOutcome, txn.GID(o.Gid), o.TxnSeqno
		ent.Commit, ent.Reason, ent.Cause = o.Commit, o.Reason, termination.Cause(o.Cause)
		if k := o.Conflict; k != nil {
			ent.Conflict = txn.Key{Level: txn.Level(k.Level), Schema: k.Schema, Table: k.Table, Column: k.Column, Value: k.Value}
		}
	case *ordov1.Entry_SchemaCheck, *ordov1.Entry_Schema, *ordov1.Entry_DataCheck, *ordov1.Entry_Data, *ordov1.Entry_Vote, *ordov1.Entry_Classes, *ordov1.Entry_Protocol,
		*ordov1.Entry_Notify:
		ent.Kind = termination.KindOther
	default:
		return ent, fmt.Errorf("replica: entry %d is of a kind this version of Ordo does not know; upgrade this node", seqno)
	}
	return ent, nil
}

// carryOut does what one decision asks, at the delivery of seqno: commit
// or roll back the node's own prepared transaction, apply another node's
// committed rows (appended to rn when they can be applied in a run), then
// answer the waiting session.
func (r *Replica) carryOut(ctx context.Context, seqno uint64, dec termination.Decision, rn *run) error {
	if dec.Origin == r.cfg.NodeID {
		r.forgetLocal(dec.GID)
	}
	delete(r.goneAborts, dec.GID)
	delete(r.begun, dec.GID)
	if dec.Seqno == 0 {
		// Aborted before its TxnEntry: the origin gave up on it. Its
		// fragments are of no use, and the origin's transaction is rolled
		// back now, as nothing else will decide it if its TxnEntry never
		// comes.
		r.dropFragments(dec.GID)
		if dec.Origin == r.cfg.NodeID {
			r.released(dec.GID) // if its session still waits for its classes
			if err := r.flush(ctx, rn); err != nil {
				return err
			}
			if err := r.finishLocal(ctx, seqno, dec.GID, false, nil, nil); err != nil {
				return err
			}
			// A session whose entry was not ordered in time may still
			// wait (Terminate, awaitOutcome): it hears the abort.
			r.notify(dec.GID, Outcome{Reason: dec.Reason, Unordered: true})
		}
		return nil
	}
	e := r.pending[dec.Seqno]
	if e == nil {
		return fmt.Errorf("replica: the decider decided seqno %d (%s), which is not a delivered transaction", dec.Seqno, dec.GID)
	}
	if dec.Commit && dec.Seqno > r.committing.Load() {
		r.committing.Store(dec.Seqno) // before it can be seen (VisiblePrefix)
	}
	delete(r.pending, dec.Seqno)
	r.count(dec)
	if !dec.Commit && e.Label != "" && dec.Seqno > r.cfg.Proven {
		r.abortedLabels = append(r.abortedLabels, proof{dec.Seqno, dec.GID, e.Label})
	}
	local := e.Origin == r.cfg.NodeID
	if !local && len(e.Ddl) == 0 && e.Fragments == 0 {
		// The common case: batched with the remote transactions around it.
		if !dec.Commit || dec.Seqno <= r.cfg.Proven { // a replayed commit is applied already
			return nil
		}
		ws, err := decodeWriteSet(e)
		if err != nil {
			return err
		}
		r.rollbackConflicting(ctx, decodeKeys(e))
		rn.items = append(rn.items, apply.Item{Seqno: dec.Seqno, WriteSet: ws})
		rn.origins = append(rn.origins, e.Origin)
		return nil
	}
	if err := r.flush(ctx, rn); err != nil {
		return err
	}
	if err := r.carryOutTxn(ctx, dec, e); err != nil {
		if !local && dec.Commit && r.votable(err) {
			return &applyFailure{seqno: dec.Seqno, gid: dec.GID, origin: e.Origin, err: err}
		}
		return err
	}
	return nil
}

// carryOutTxn carries out a decided transaction that is the node's own,
// has DDL or has fragments.
func (r *Replica) carryOutTxn(ctx context.Context, dec termination.Decision, e *ordov1.TxnEntry) error {
	if len(e.Ddl) > 0 {
		r.awaitFingerprint() // it reads the schema before this DDL
	}
	var frags *fragments
	if e.Fragments > 0 {
		frags = r.dropFragments(dec.GID)
	}
	if e.Origin == r.cfg.NodeID {
		if dec.Commit && dec.Seqno > r.cfg.Proven {
			r.tellEarly(dec.GID, dec.Seqno, len(e.Ddl) > 0) // (made visible by finishEntry: showTold)
		}
		if err := r.finishLocal(ctx, dec.Seqno, dec.GID, dec.Commit, e, frags); err != nil {
			return err
		}
		if dec.Commit && dec.Seqno > r.cfg.Proven && r.Name() == termination.DBSMRC {
			// Under dbsm-rc a SERIALIZABLE transaction is certified from
			// no later than the largest proof row its snapshot holds
			// (_ordo.committed_prefix(), read by the probe): the proof
			// row goes before the commit is shown (showTold, the notify
			// below), or the client's next transaction, taking its
			// snapshot at once, is certified from before its own last
			// commit and aborts on it.
			if err := r.flushProofs(ctx); err != nil {
				return err
			}
		}
	} else if dec.Commit {
		r.rollbackConflicting(ctx, decodeKeys(e))
		if err := r.applyEntry(ctx, dec.Seqno, e, frags); err != nil {
			return err
		}
	}
	if dec.Commit && len(e.Ddl) > 0 {
		if r.cfg.OnDDL != nil {
			r.cfg.OnDDL(ctx)
		}
		r.cfg.Applier.Forget(ctx)
		if dec.Seqno > r.cfg.Proven {
			r.fingerprint(ctx, dec.Seqno)
		}
	}
	// (An abort of its origin's decided it: the origin's session waited
	// on after its entry was not ordered in time.)
	r.notify(dec.GID, Outcome{Commit: dec.Commit, Seqno: dec.Seqno, Reason: dec.Reason,
		Unordered: !dec.Commit && dec.Cause == termination.CauseOriginAbort})
	return nil
}

// notify hands gid's outcome to the session waiting for it, if any, once
// (its channel holds one: the first outcome carried out is the one).
func (r *Replica) notify(gid txn.GID, o Outcome) {
	r.mu.Lock()
	if w := r.waiters[gid]; w != nil && !w.decided {
		w.decided = true
		w.ch <- o
	}
	r.mu.Unlock()
}

// count counts a decided transaction (not one decided before a restart).
func (r *Replica) count(dec termination.Decision) {
	if dec.Cause == termination.CauseReplayed {
		return
	}
	origin := "remote"
	if dec.Origin == r.cfg.NodeID {
		origin = "local"
	}
	if dec.Commit {
		r.m.outcomes.WithLabelValues(r.loopProtocol, origin, "commit", "").Inc()
	} else {
		r.m.outcomes.WithLabelValues(r.loopProtocol, origin, "abort", string(dec.Cause)).Inc()
		r.hot.record(dec.Conflict, time.Now())
	}
}

// deliverOther carries out an entry no decider decides on.
func (r *Replica) deliverOther(ctx context.Context, seqno uint64, e *ordov1.Entry, rn *run) error {
	switch k := e.Kind.(type) {
	case *ordov1.Entry_SchemaCheck:
		if err := r.flush(ctx, rn); err != nil {
			return err
		}
		if seqno > r.cfg.Proven {
			r.fingerprint(ctx, seqno)
		}
	case *ordov1.Entry_Schema:
		if err := r.flush(ctx, rn); err != nil {
			return err
		}
		if k.Schema.Node != r.cfg.NodeID {
			r.deliverSchema(k.Schema)
		}
	case *ordov1.Entry_DataCheck:
		r.lastDataCheck.Store(time.Now().UnixNano())
		r.m.dataChecks.Inc()
		if err := r.flush(ctx, rn); err != nil {
			return err
		}
		if seqno > r.cfg.Proven {
			r.dataSnapshot(ctx, seqno, k.DataCheck.Buckets)
		}
	case *ordov1.Entry_Data:
		if k.Data.Node != r.cfg.NodeID {
			r.compareData(k.Data)
		}
	case *ordov1.Entry_Vote:
		if !k.Vote.Ok {
			// This node answers a failure only for an entry it carried
			// out: one still in the run is applied first (it may fail
			// here too, and this node then votes with the failing side).
			if err := r.flush(ctx, rn); err != nil {
				return err
			}
		}
		return r.deliverVote(k.Vote)
	case *ordov1.Entry_Classes:
		return r.deliverClasses(ctx, seqno, k.Classes)
	case *ordov1.Entry_Notify:
		if k.Notify.Origin == r.cfg.NodeID || seqno <= r.cfg.Proven {
			return nil // its origin sent them; a replay sent them before
		}
		// After the transactions ordered before it are visible, as a
		// listener on the origin would see them.
		if err := r.flush(ctx, rn); err != nil {
			return err
		}
		r.sendNotifications(ctx, seqno, k.Notify.Notify)
	}
	return nil
}

// flush applies the run of remote transactions rn holds and publishes the
// prefix it covers.
func (r *Replica) flush(ctx context.Context, rn *run) error {
	if len(rn.items) == 0 {
		return nil
	}
	if err := r.flushProofs(ctx); err != nil {
		return err
	}
	began := time.Now()
	lastApplied := rn.items[len(rn.items)-1].Seqno
	var err error
	if len(rn.items) == 1 || r.cfg.Applier.Workers() == 1 {
		for _, it := range rn.items {
			if _, err = r.cfg.Applier.Apply(ctx, it.Seqno, it.WriteSet); err != nil {
				err = fmt.Errorf("replica: apply %s at seqno %d: %w", it.WriteSet.GID, it.Seqno, err)
				break
			}
		}
	} else if err = r.cfg.Applier.ApplyBatch(ctx, rn.items); err != nil {
		err = fmt.Errorf("replica: apply seqnos %d-%d: %w", rn.items[0].Seqno, rn.items[len(rn.items)-1].Seqno, err)
	}
	if err != nil {
		if !r.votable(err) {
			return err
		}
		if lastApplied, err = r.flushVoting(ctx, rn); err != nil {
			return err
		}
	}
	per := time.Since(began).Seconds() / float64(len(rn.items))
	for range rn.items {
		r.m.applyLatency.Observe(per)
	}
	if lastApplied > 0 {
		r.proved(lastApplied)
	}
	rn.items, rn.origins = rn.items[:0], rn.origins[:0]
	r.publish(rn.last)
	return nil
}

// flushVoting applies a run one transaction at a time after applying it
// failed in a way PostgreSQL would repeat (a row that is not there, a
// duplicate key): the transactions it applied already are skipped (their
// proof rows say so), and one that fails is put to the cluster's vote
// (vote.go) before the next is applied. It returns the last seqno it
// applied (0: none), or the error that ends the node's part in the
// cluster.
func (r *Replica) flushVoting(ctx context.Context, rn *run) (lastApplied uint64, err error) {
	for i, it := range rn.items {
		if _, err := r.cfg.Applier.Apply(ctx, it.Seqno, it.WriteSet); err != nil {
			err = fmt.Errorf("replica: apply %s at seqno %d: %w", it.WriteSet.GID, it.Seqno, err)
			if !r.votable(err) {
				return 0, err
			}
			if err := r.awaitVerdict(ctx, it.Seqno, it.WriteSet.GID, rn.origins[i], err); err != nil {
				return 0, err
			}
			continue // skipped by the cluster's verdict
		}
		lastApplied = it.Seqno
	}
	return lastApplied, nil
}

// finishLocal commits or rolls back one of this node's prepared
// transactions.
func (r *Replica) finishLocal(ctx context.Context, seqno uint64, gid txn.GID, commit bool, e *ordov1.TxnEntry, frags *fragments) (err error) {
	defer func() {
		if err == nil && r.tg.leftover.Load() {
			r.leftoverDone(gid) // (told.go)
		}
	}()
	lit := quoteGID(gid)
	if r.takeDecided(gid) {
		// Rolled back early to let an earlier apply through (still
		// prepared if this process died between the record and the
		// rollback). Should the order have committed it after all, its
		// rows are applied like a remote transaction's.
		rollback := "ROLLBACK PREPARED " + lit
		if err := r.execRetrying(ctx, rollback, notPrepared, rollback); err != nil {
			return err
		}
		if commit && e != nil {
			if err := r.applyEntry(ctx, seqno, e, frags); err != nil {
				return err
			}
		}
		if err := r.execRetrying(ctx, "withdraw the early rollback of "+string(gid), nil, "DELETE FROM _ordo.rolled_back WHERE gid = $1", string(gid)); err != nil {
			return err
		}
		r.rolledMu.Lock()
		delete(r.rolledBack, gid)
		r.rolledMu.Unlock()
		return nil
	}
	stmt := "ROLLBACK PREPARED " + lit
	if commit {
		stmt = "COMMIT PREPARED " + lit
	}
	// Not prepared (any more): finished before a restart (an early
	// rollback would have been recorded), or the origin never got as far
	// as PREPARE (a rollback).
	label := ""
	if e != nil {
		label = e.Label
	}
	began := time.Now()
	if commit && seqno > r.cfg.Proven && r.Name() == termination.DBSMRC {
		// Its proof row goes before the commit is shown (carryOutTxn):
		// with the COMMIT PREPARED, in its round trip, after those not
		// written yet. Should that fail, the way below retries each
		// apart.
		if err := commitWithProof(ctx, r.conn, stmt, append(r.proofs, proof{seqno, gid, label})); err == nil {
			r.m.localCommit.Observe(time.Since(began).Seconds())
			r.proofs = r.proofs[:0]
			r.proved(seqno)
			return nil
		} else if ctx.Err() == nil {
			r.log.Debug("replica: a COMMIT PREPARED with its proof row failed; each apart", "gid", gid, "err", err)
		}
	}
	if err := r.execRetrying(ctx, stmt, notPrepared, stmt); err != nil {
		return err
	}
	if commit {
		r.m.localCommit.Observe(time.Since(began).Seconds())
		r.proofs = append(r.proofs, proof{seqno, gid, label})
	}
	return nil
}

// applyEntry applies a committed remote transaction with its fragments.
func (r *Replica) applyEntry(ctx context.Context, seqno uint64, e *ordov1.TxnEntry, frags *fragments) error {
	if seqno <= r.cfg.Proven {
		return nil // replayed: it committed, so its proof row says it is applied
	}
	if err := r.flushProofs(ctx); err != nil {
		return err
	}
	ws, err := frags.writeSet(e)
	if err != nil {
		return fmt.Errorf("replica: %s at seqno %d: %w", e.Gid, seqno, err)
	}
	ws.DDL, ws.SearchPath = e.Ddl, e.SearchPath
	if ws.DDLSettings, err = decodeSettings(e); err != nil {
		return err
	}
	if ws.DDLRowsBefore, err = decodeRowsBefore(e, len(ws.Rows)); err != nil {
		return err
	}
	began := time.Now()
	if _, err := r.cfg.Applier.Apply(ctx, seqno, ws); err != nil {
		return fmt.Errorf("replica: apply %s at seqno %d: %w", e.Gid, seqno, err)
	}
	r.proved(seqno)
	r.m.applyLatency.Observe(time.Since(began).Seconds())
	return nil
}

// publish makes seqno the applied prefix, unless the node replays entries
// below its proven prefix (which the prefix already covers). The total
// order hears of it once it is durable (markDurable).
func (r *Replica) publish(seqno uint64) {
	if seqno <= r.prefix.Load() {
		return
	}
	r.prefix.Store(seqno)
	r.mu.Lock()
	close(r.prefixCh)
	r.prefixCh = make(chan struct{})
	r.mu.Unlock()
	r.m.applied.Set(float64(seqno))
}

// tooFarBehind is the error for a snapshot from the total order at seqno:
// the log no longer holds entries this node must replay.
func (r *Replica) tooFarBehind(seqno uint64) error {
	if seqno <= r.cfg.Proven {
		// A copy at Proven, but the log lacks the certification window
		// before it: the donor's applied prefix was too close to where
		// the others compacted.
		return fmt.Errorf("replica: the total order sent a snapshot at seqno %d: the cluster's log no longer holds the certification window "+
			"before this node's copy (seqno %d); run 'ordo join --rejoin' again, from a member that is not behind (docs/membership.md)", seqno, r.cfg.Proven)
	}
	return fmt.Errorf("replica: the total order sent a snapshot at seqno %d: this node (at %d) is too far behind to catch up from the log: "+
		"run 'ordo join --config NODE.yaml --from ADMIN_ADDRESS_OF_ANOTHER_MEMBER --rejoin', which replaces its database with a copy of the other's "+
		"and brings it back under its own id (docs/membership.md)", seqno, r.cfg.Proven)
}
