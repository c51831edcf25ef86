package admin

import (
	"context"

	"go.etcd.io/raft/v3"

	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/internal/totalorder"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Order is what the admin API reads of the total order
// (*totalorder.Node). Every method must return promptly; ReadIndex is
// bounded by its ctx.
type Order interface {
	// Leader is the leader this node knows of, 0 if none.
	Leader() uint64
	// Members are the ids of the group's members.
	Members() []uint64
	// Status is raft's view of this node (zero once it stopped).
	Status() raft.Status
	// Delivered is the seqno of the last entry handed to the replica.
	Delivered() uint64
	// PeersApplied is the applied index each other member reported.
	PeersApplied() map[uint64]uint64
	// ReadIndex confirms with a quorum the cluster's commit point and
	// returns the seqno this node must apply to be caught up with it.
	ReadIndex(ctx context.Context) (uint64, error)
	// Err says why the total order stopped, nil while it runs.
	Err() error
}

// Replica is what the admin API reads of, and asks of, the delivery engine
// (*replica.Replica).
type Replica interface {
	// Name is the protocol in force.
	Name() string
	CertifiesReads() bool
	AppliedPrefix() uint64
	// Err says why the node refuses updates, nil if it does not.
	Err() error
	Schema() replica.SchemaStatus
	// RequestSchemaCheck proposes a schema check and returns its seqno.
	RequestSchemaCheck(ctx context.Context) (uint64, error)
	Data() replica.DataStatus
	// RequestDataCheck proposes a data check and returns its seqno.
	RequestDataCheck(ctx context.Context) (uint64, error)
	// TxnStatus answers, once caught up with the cluster, what became of
	// the transaction labelled label.
	TxnStatus(ctx context.Context, label string) (string, error)
	// SwitchProtocol switches the cluster's protocol through the order and
	// returns the switch's seqno once this node switched; ProtocolSince is
	// the seqno of the latest switch (0: none).
	SwitchProtocol(ctx context.Context, name string) (uint64, error)
	ProtocolSince() uint64
	// HotConflicts are the keys and tables certification aborts
	// conflicted on the most over the last minutes.
	HotConflicts() replica.HotConflicts
	// Classes is the conflict-class configuration in force.
	Classes() *ordov1.ClassConfig
	// ChangeClasses changes it through the order and returns the
	// configuration once this node applied the change.
	ChangeClasses(ctx context.Context, e *ordov1.ClassesEntry) (*ordov1.ClassConfig, error)
}

var (
	_ Order   = (*totalorder.Node)(nil)
	_ Replica = (*replica.Replica)(nil)
)
