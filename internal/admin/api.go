package admin

import "github.com/ordo-db/ordo/internal/replica"

// Paths of the admin API. Every body is JSON; errors are ErrorBody with a
// 4xx or 5xx status.
const (
	PathStatus      = "/v1/status"       // GET: Status
	PathProtocol    = "/v1/protocol"     // GET: Protocol; POST ProtocolSwitch: Protocol once switched
	PathSchema      = "/v1/schema"       // GET: SchemaStatus
	PathSchemaCheck = "/v1/schema/check" // POST: SchemaCheck
	PathData        = "/v1/data"         // GET: DataStatus
	PathDataCheck   = "/v1/data/check"   // POST: SchemaCheck (the seqno of the data check)
	PathTxn         = "/v1/txn"          // GET ?label=L: TxnStatus
	PathClasses     = "/v1/classes"      // GET: Classes; POST ClassesChange: Classes
	// PathReady is served on the metrics address, unauthenticated:
	// 200 or 503 with a Ready body.
	PathReady = "/readyz"
)

// Status is a node's view of itself and of the cluster.
type Status struct {
	NodeID   uint32 `json:"node_id"`
	Version  string `json:"version"`
	Protocol string `json:"protocol"`
	// Leader is the Raft leader this node knows of, 0 if none.
	Leader uint64 `json:"leader"`
	Raft   Raft   `json:"raft"`
	// AppliedPrefix is the largest seqno up to which every entry is
	// carried out on this node's PostgreSQL.
	AppliedPrefix uint64 `json:"applied_prefix"`
	// DeliveredSeqno is the seqno of the last entry the total order
	// handed to this node's replica.
	DeliveredSeqno uint64 `json:"delivered_seqno"`
	// Lag is how far this node is behind the order: the Raft entries
	// committed but not yet applied by its log, plus the delivered
	// entries its replica has not carried out (as the dashboard's
	// "behind the order"; entries never delivered, such as a new
	// leader's empty entry, do not count).
	Lag uint64 `json:"lag"`
	// Members are the Raft group's members as this node sees them.
	Members []Member `json:"members"`
	// RefusesUpdates is true when the node refuses update transactions
	// (its replica failed, or its total order stopped); Refusal says why.
	RefusesUpdates bool   `json:"refuses_updates"`
	Refusal        string `json:"refusal,omitempty"`
	Ready          Ready  `json:"ready"`
	// Transactions counts update transactions by outcome, origin and
	// abort reason since the node started (ordo_replica_transactions_total).
	Transactions    []TxnCount `json:"transactions"`
	PostgresVersion string     `json:"postgres_version"`
	// Hot are the keys and tables certification aborts conflicted on
	// the most over the last minutes, hottest first (every node decides
	// alike, so each node's view is the cluster's).
	Hot HotConflicts `json:"hot_conflicts"`
}

// HotConflicts are the hottest conflicting keys and tables.
type HotConflicts = replica.HotConflicts

// Raft is this node's Raft state.
type Raft struct {
	// State: leader, follower, candidate, pre-candidate, or stopped.
	State   string `json:"state"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit_index"`
	Applied uint64 `json:"applied_index"`
}

// Member is one member of the group as the answering node sees it.
type Member struct {
	ID     uint64 `json:"id"`
	Leader bool   `json:"leader"`
	// Role: voter or learner (a joining node); absent when the node does
	// not manage membership.
	Role string `json:"role,omitempty"`
	// Applied is the member's applied prefix: the answering node's own, or
	// what another member last reported to it (durably applied, so it may
	// trail a little); absent when not heard from.
	Applied *uint64 `json:"applied,omitempty"`
	// Lag is Status.Lag for the answering node; for another member, the
	// seqnos between the last entry the answering node was delivered and
	// Applied.
	Lag *uint64 `json:"lag,omitempty"`
	// Match is the Raft log index the leader knows the member holds
	// (only when the answering node leads).
	Match *uint64 `json:"match,omitempty"`
}

// Ready says whether the node can commit update transactions now.
type Ready struct {
	Ready bool `json:"ready"`
	// Reason says why not.
	Reason string `json:"reason,omitempty"`
	// ReadIndex is the cluster's commit point the check confirmed with a
	// quorum (0 if it could not), AppliedPrefix this node's.
	ReadIndex     uint64 `json:"read_index,omitempty"`
	AppliedPrefix uint64 `json:"applied_prefix"`
}

// TxnCount is how many update transactions ended one way.
type TxnCount struct {
	// Origin: local (this node's clients) or remote.
	Origin string `json:"origin"`
	// Outcome: commit or abort.
	Outcome string `json:"outcome"`
	// Reason of an abort: certification, too_old, origin_abort,
	// brute_force.
	Reason string `json:"reason,omitempty"`
	Count  uint64 `json:"count"`
}

// Protocol is the termination protocol a node runs.
type Protocol struct {
	NodeID uint32 `json:"node_id"`
	// Name: dbsm, dbsm-si, dbsm-rc, pgr or cons.
	Name string `json:"name"`
	// Guarantee is what the protocol promises clients.
	Guarantee string `json:"guarantee"`
	// CertifiesReads: read sets are certified (serializable).
	CertifiesReads bool `json:"certifies_reads"`
	// CertificationWindow is how many seqnos certification remembers.
	CertificationWindow uint64 `json:"certification_window"`
	// Source is where the protocol in force comes from.
	Source string `json:"source"`
	// Since is the seqno of the switch that put it in force (0: node.yaml's
	// initial protocol, never switched).
	Since uint64 `json:"since,omitempty"`
}

// ProtocolSwitch asks for a switch (POST /v1/protocol).
type ProtocolSwitch struct {
	Name string `json:"name"`
}

// DataStatus is the latest data comparisons of a node with the others.
type DataStatus = replica.DataStatus

// TxnStatus is what became of the transaction labelled Label (SET
// ordo.txn_label): committed, aborted or unknown (docs/outcomes.md).
type TxnStatus struct {
	Label  string `json:"label"`
	Status string `json:"status"`
}

// SchemaStatus is the latest schema comparisons of a node with the others
// (GET /v1/schema).
type SchemaStatus = replica.SchemaStatus

// PeerSchema is the comparison with one other node.
type PeerSchema = replica.PeerSchema

// SchemaCheck is the answer to POST /v1/schema/check: the seqno at which
// every node fingerprints its schema.
type SchemaCheck struct {
	AtSeqno uint64 `json:"at_seqno"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
}
