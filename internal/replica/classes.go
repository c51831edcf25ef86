package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/classes"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Conflict classes and profiles are cluster configuration (DESIGN.md
// "Conflict classes"): a ClassesEntry changes them, and every node applies
// the change at its seqno (classes.Apply: the same result, or the same
// refusal, everywhere). The configuration in force is kept in
// _ordo.cluster_config with the seqno that made it, written by the
// delivery loop before it goes on, so a restarted node starts from it and
// skips the entries it replays up to that seqno.

const classesKey = "classes"

// Classes returns the conflict-class configuration in force (never nil;
// its Seqno is 0 if none was ever applied). Safe for concurrent use; the
// result must not be modified.
func (r *Replica) Classes() *ordov1.ClassConfig {
	if c := r.classes.Load(); c != nil {
		return c
	}
	return &ordov1.ClassConfig{}
}

// loadClasses reads the configuration in force before a restart (delivery
// loop, before the first delivery).
func (r *Replica) loadClasses(ctx context.Context) error {
	var value []byte
	err := r.conn.QueryRow(ctx, "SELECT value FROM _ordo.cluster_config WHERE name = $1", classesKey).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replica: read the conflict classes: %w", err)
	}
	var cfg ordov1.ClassConfig
	if err := proto.Unmarshal(value, &cfg); err != nil {
		return fmt.Errorf("replica: the conflict classes in _ordo.cluster_config: %w", err)
	}
	r.classes.Store(&cfg)
	r.granulesChanged(ctx, &cfg)
	return nil
}

// deliverClasses applies a ClassesEntry delivered at seqno.
func (r *Replica) deliverClasses(ctx context.Context, seqno uint64, e *ordov1.ClassesEntry) error {
	cur := r.Classes()
	if seqno <= cur.Seqno {
		return nil // replayed: in force already
	}
	next, err := classes.Apply(cur, e, seqno)
	if err != nil {
		// Refused alike by every node.
		r.log.Warn("a change of the conflict classes was refused", "seqno", seqno, "by", e.By, "err", err)
		r.m.classChanges.WithLabelValues("refused").Inc()
		return nil
	}
	value, err := proto.Marshal(next)
	if err != nil {
		return fmt.Errorf("replica: encode the conflict classes: %w", err)
	}
	if err := r.execRetrying(ctx, "persist the conflict classes", nil,
		`INSERT INTO _ordo.cluster_config (name, seqno, value) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET seqno = excluded.seqno, value = excluded.value`, classesKey, int64(seqno), value); err != nil {
		return err
	}
	r.classes.Store(next)
	if !slices.Equal(cur.GranuleChanges, next.GranuleChanges) {
		r.granulesChanged(ctx, next)
	}
	r.m.classChanges.WithLabelValues("applied").Inc()
	r.log.Info("conflict classes changed", "seqno", seqno, "by", e.By, "classes", len(next.Classes), "profiles", len(next.Profiles))
	return nil
}

// ErrClassesRefused is returned by ChangeClasses when the change does not
// check out against the configuration in force (classes.ErrInvalid is
// wrapped too), or was refused when the order delivered it.
var ErrClassesRefused = errors.New("replica: the change of the conflict classes was refused")

// ChangeClasses proposes a change of the conflict classes and waits until
// this node has applied it; it returns the configuration then in force.
// The change is checked against the configuration in force first, so a
// mistake is reported at once rather than refused by every node.
func (r *Replica) ChangeClasses(ctx context.Context, e *ordov1.ClassesEntry) (*ordov1.ClassConfig, error) {
	if _, err := classes.Apply(r.Classes(), e, r.Classes().Seqno+1); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClassesRefused, err)
	}
	e = proto.Clone(e).(*ordov1.ClassesEntry)
	e.By = r.cfg.NodeID
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Classes{Classes: e}})
	if err != nil {
		return nil, err
	}
	seqno, err := r.cfg.Order.Propose(ctx, payload)
	if err != nil {
		return nil, fmt.Errorf("replica: propose the change of the conflict classes: %w", err)
	}
	if err := r.WaitApplied(ctx, seqno); err != nil {
		return nil, fmt.Errorf("replica: wait for the change of the conflict classes (seqno %d) to be applied: %w", seqno, err)
	}
	cfg := r.Classes()
	if cfg.Seqno != seqno {
		return cfg, fmt.Errorf("%w at seqno %d (a concurrent change made it invalid)", ErrClassesRefused, seqno)
	}
	return cfg, nil
}

// granulesChanged hands the granule columns of cfg to the node
// (Config.OnGranules).
func (r *Replica) granulesChanged(ctx context.Context, cfg *ordov1.ClassConfig) {
	if r.cfg.OnGranules == nil || len(cfg.GranuleChanges) == 0 {
		return
	}
	g := classes.Granules(cfg)
	at := classes.GranuleSeqnoAt(cfg, cfg.Seqno)
	r.log.Info("granule columns of the conflict classes in force", "seqno", at, "tables", len(g))
	r.cfg.OnGranules(ctx, g, at)
}
