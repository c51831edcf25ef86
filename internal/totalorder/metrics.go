package totalorder

import "github.com/prometheus/client_golang/prometheus"

// metrics of one node, registered on the Registerer from Config (if any).
type metrics struct {
	proposals        prometheus.Counter
	proposalFailures prometheus.Counter
	proposalRetries  prometheus.Counter
	commitLatency    prometheus.Histogram
	leaderChanges    prometheus.Counter
	isLeader         prometheus.Gauge
	term             prometheus.Gauge
	applied          prometheus.Gauge
	delivered        prometheus.Gauge
	committed        prometheus.Gauge
	snapshotsMade    prometheus.Counter
	snapshotsRecv    prometheus.Counter
	inflight         prometheus.Gauge
	logSync          prometheus.Histogram
	refused          prometheus.Counter
	followTransfers  prometheus.Counter
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		proposals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_proposals_total", Help: "Proposals committed and delivered locally."}),
		proposalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_proposal_failures_total", Help: "Proposals that returned an error."}),
		proposalRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_proposal_retries_total", Help: "Proposals lost in a leader change and proposed again."}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ordo_totalorder_commit_latency_seconds",
			Help:    "Time from Propose to local delivery of the committed entry.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_leader_changes_total", Help: "Leader changes seen by this node."}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_totalorder_is_leader", Help: "1 while this node is the Raft leader."}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_totalorder_term", Help: "Current Raft term."}),
		applied: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_totalorder_applied_index", Help: "Last Raft index applied (delivered) by this node."}),
		delivered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_totalorder_delivered_seqno", Help: "Seqno of the last entry handed to the consumer (the replica); with the consumer's applied prefix, its backlog."}),
		committed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_totalorder_committed_index", Help: "Last Raft index known committed."}),
		snapshotsMade: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_snapshots_created_total", Help: "Snapshots created (log compactions)."}),
		snapshotsRecv: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_snapshots_received_total", Help: "Snapshots received from a leader."}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_totalorder_inflight_proposals", Help: "Proposals waiting to commit."}),
		logSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ordo_totalorder_log_save_seconds",
			Help:    "Time to write and fsync one batch of log records.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_refused_messages_total", Help: "Raft messages from peers refused before raft saw them (check.go)."}),
		followTransfers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_totalorder_follow_transfers_total", Help: "Leadership handed by this node to the node that proposed most entries (follow.go)."}),
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.proposals, m.proposalFailures, m.proposalRetries, m.commitLatency,
			m.leaderChanges, m.isLeader, m.term, m.applied, m.delivered, m.committed, m.snapshotsMade, m.snapshotsRecv, m.inflight, m.logSync, m.refused, m.followTransfers} {
			if err := r.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
