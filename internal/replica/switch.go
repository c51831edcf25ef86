package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/termination/cons"
	"github.com/ordo-db/ordo/internal/termination/dbsm"
	"github.com/ordo-db/ordo/internal/termination/pgr"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// The protocol in force is cluster state (DESIGN.md "Engine and
// deciders"): node.yaml's protocol is the initial value; a ProtocolEntry
// switches every node at its seqno s:
//
//  1. the old decider drains (termination.Drainer): pgr's undecided
//     transactions abort, and what it held is carried out;
//  2. a new decider starts after s with an empty certification index, so a
//     transaction whose snapshot predates the switch aborts as too old
//     (the deciders share no index: that is the rule we chose);
//  3. a TxnEntry proposed under a protocol that was in force before, and
//     delivered after the switch, aborts (CauseSwitch), on every node;
//     one of a protocol never in force stops the node as before (its
//     node.yaml names another protocol than the cluster's);
//  4. sessions waiting for conflict classes are told the transaction
//     aborted.
//
// The switches are kept in _ordo.cluster_config: a restarted node starts
// its replay with the protocol in force where the replay starts, and
// switches again at each ProtocolEntry it replays.

const protocolKey = "protocol"

// ErrProtocolSwitched is termination.ErrProtocolSwitched, returned by
// Begin.
var ErrProtocolSwitched = termination.ErrProtocolSwitched

// Protocols are the protocols a cluster can run.
var Protocols = []string{DBSM, DBSMSI, PGR, CONS}

func newDecider(protocol string, node uint32, window, start uint64) (termination.Decider, error) {
	switch protocol {
	case PGR:
		return pgr.New(node, window, start)
	case CONS:
		return cons.New(window, start)
	default:
		return dbsm.New(protocol, window, start)
	}
}

// LoadProtocolHistory reads the protocol switches a node made before it
// restarted, from its database (for Config.History).
func LoadProtocolHistory(ctx context.Context, conn *pgx.Conn) ([]*ordov1.ProtocolSwitch, error) {
	var value []byte
	err := conn.QueryRow(ctx, "SELECT value FROM _ordo.cluster_config WHERE name = $1", protocolKey).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replica: read the protocol history: %w", err)
	}
	var h ordov1.ProtocolHistory
	if err := proto.Unmarshal(value, &h); err != nil {
		return nil, fmt.Errorf("replica: the protocol history in _ordo.cluster_config: %w", err)
	}
	return h.Switches, nil
}

// protocolAt returns, from cfg, the protocol in force after seqno, and the
// latest switch (nil if none).
func protocolAt(cfg *Config, seqno uint64) (string, *ordov1.ProtocolSwitch) {
	at := cfg.Protocol
	var latest *ordov1.ProtocolSwitch
	for _, s := range cfg.History {
		if s.Seqno <= seqno {
			at = s.Name
		}
		latest = s
	}
	return at, latest
}

// switchAborts decides, without its decider, a TxnEntry proposed under a
// protocol that is no longer in force; ok is false if the entry is of the
// protocol in force, or of one never in force (the decider refuses it).
func (r *Replica) switchAborts(ent *termination.Entry) (termination.Decision, bool) {
	if ent.Kind != termination.KindTxn || ent.Protocol == r.loopProtocol || !r.everInForce[ent.Protocol] {
		return termination.Decision{}, false
	}
	return termination.Decision{GID: ent.GID, Origin: ent.Origin, Seqno: ent.Seqno,
		Reason: fmt.Sprintf("proposed under protocol %s, and the cluster switched to %s", ent.Protocol, r.loopProtocol), Cause: termination.CauseSwitch}, true
}

// switchTo carries out a ProtocolEntry delivered at seqno (delivery loop).
func (r *Replica) switchTo(ctx context.Context, seqno uint64, e *ordov1.ProtocolEntry, rn *run) error {
	if e.Name == r.loopProtocol {
		return nil
	}
	if !slices.Contains(Protocols, e.Name) {
		r.log.Warn("a switch to an unknown protocol was refused", "seqno", seqno, "protocol", e.Name)
		return nil
	}
	if d, ok := r.dec.(termination.Drainer); ok {
		for _, dec := range d.Drain() {
			if err := r.carryOut(ctx, seqno, dec, rn); err != nil {
				return err
			}
		}
	}
	dec, err := newDecider(e.Name, r.cfg.NodeID, r.cfg.Window, seqno)
	if err != nil {
		return fmt.Errorf("replica: switch to %s: %w", e.Name, err)
	}
	old := r.loopProtocol
	r.dec, r.loopProtocol = dec, e.Name
	r.everInForce[e.Name] = true
	if n := len(r.history); n == 0 || r.history[n-1].Seqno < seqno {
		r.history = append(r.history, &ordov1.ProtocolSwitch{Seqno: seqno, Name: e.Name})
		value, err := proto.Marshal(&ordov1.ProtocolHistory{Switches: r.history})
		if err != nil {
			return err
		}
		if err := r.execRetrying(ctx, "persist the protocol switch", nil,
			`INSERT INTO _ordo.cluster_config (name, seqno, value) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET seqno = excluded.seqno, value = excluded.value`, protocolKey, int64(seqno), value); err != nil {
			return err
		}
	}
	if latest := r.history[len(r.history)-1].Name; latest != *r.protocol.Load() {
		r.protocol.Store(&latest)
		r.m.initOutcomes(latest)
	}
	clear(r.begun)
	r.mu.Lock()
	r.since = seqno
	for _, ct := range r.cons {
		select {
		case <-ct.granted: // running: its TxnEntry aborts
		default:
			ct.switched = true
			close(ct.granted)
		}
	}
	r.mu.Unlock()
	r.log.Info("the cluster switched protocols", "seqno", seqno, "from", old, "to", e.Name, "by", e.By)
	return nil
}

// SwitchProtocol switches the cluster to protocol name through the order
// and waits until this node has switched; it returns the switch's seqno.
func (r *Replica) SwitchProtocol(ctx context.Context, name string) (uint64, error) {
	if name == DBSMRC || r.Name() == DBSMRC {
		// Sessions run at the client's isolation level under dbsm-rc and
		// at REPEATABLE READ under the others, from their start.
		return 0, fmt.Errorf("%w: dbsm-rc cannot be switched to or from online (sessions run at the client's isolation level under it, at REPEATABLE READ under the others); set protocol: in every node's node.yaml and restart the cluster", ErrBadProtocol)
	}
	if !slices.Contains(Protocols, name) {
		return 0, fmt.Errorf("%w: unknown protocol %q (one of %v)", ErrBadProtocol, name, Protocols)
	}
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Protocol{Protocol: &ordov1.ProtocolEntry{Name: name, By: r.cfg.NodeID}}})
	if err != nil {
		return 0, err
	}
	seqno, err := r.cfg.Order.Propose(ctx, payload)
	if err != nil {
		return 0, fmt.Errorf("replica: propose the switch to %s: %w", name, err)
	}
	if err := r.WaitApplied(ctx, seqno); err != nil {
		return seqno, fmt.Errorf("replica: wait for the switch to %s (seqno %d): %w", name, seqno, err)
	}
	return seqno, nil
}

// ErrBadProtocol is returned by SwitchProtocol for a switch it refuses:
// to a name that is not a protocol, or to or from dbsm-rc.
var ErrBadProtocol = errors.New("replica: protocol switch refused")

// ProtocolSince returns the seqno of the switch that put the protocol in
// force (0: node.yaml's, never switched).
func (r *Replica) ProtocolSince() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.since
}
