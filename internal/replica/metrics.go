package replica

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	outcomes      *prometheus.CounterVec // protocol, origin, outcome, reason
	readKeys      prometheus.Histogram
	writeRows     prometheus.Histogram
	bruteForce    prometheus.Counter
	commitLatency prometheus.Histogram
	applyLatency  prometheus.Histogram
	localCommit   prometheus.Histogram // COMMIT PREPARED of a local commit
	toldWait      prometheus.Histogram // a statement's wait for told commits
	applied       prometheus.Gauge
	queue         prometheus.Gauge
	fragments     prometheus.Counter
	fragmentBytes prometheus.Gauge

	schemaMismatches prometheus.Counter
	schemaCompared   *prometheus.CounterVec // result: consistent, different, unavailable
	schemaConsistent prometheus.Gauge
	dataMismatches   prometheus.Counter
	dataChecks       prometheus.Counter
	votes            *prometheus.CounterVec // vote: ok, fail
	classChanges     *prometheus.CounterVec // result: applied, refused
	dataConsistent   prometheus.Gauge
}

// initOutcomes exports every outcome series of protocol at 0, so rates and
// alerts see each from the start.
func (m *metrics) initOutcomes(protocol string) {
	for _, origin := range []string{"local", "remote"} {
		m.outcomes.WithLabelValues(protocol, origin, "commit", "")
		for _, reason := range []string{"certification", "too_old", "origin_abort", "origin_gone"} {
			m.outcomes.WithLabelValues(protocol, origin, "abort", reason)
		}
	}
	m.outcomes.WithLabelValues(protocol, "local", "abort", "brute_force")
}

func newMetrics(reg prometheus.Registerer) *metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs … 13s
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_replica_transactions_total",
			Help: "Update transactions, by protocol, origin (local/remote), outcome (commit/abort) and abort reason: certification (a conflict), too_old (snapshot before the certification window), origin_abort (the origin gave up waiting, a timeout, and its abort was ordered first), origin_gone (pgr: the origin failed or restarted before it proposed the outcome), brute_force (a local transaction aborted while it ran because it blocked an apply).",
		}, []string{"protocol", "origin", "outcome", "reason"}),
		readKeys: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_replica_read_set_keys", Help: "Read keys certified per local transaction (dbsm).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		writeRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_replica_write_set_rows", Help: "Rows written per local update transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		bruteForce: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_replica_bruteforce_rollbacks_total",
			Help: "Local prepared transactions rolled back early because they blocked an apply.",
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_replica_terminate_seconds", Help: "Propose to outcome, for this node's transactions.", Buckets: buckets,
		}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_replica_apply_seconds", Help: "Time to apply one remote transaction.", Buckets: buckets,
		}),
		localCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_replica_local_commit_seconds", Help: "Time the delivery loop's COMMIT PREPARED of one of this node's transactions took (its session was told before it, unless it ran DDL).", Buckets: buckets,
		}),
		toldWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_replica_visibility_wait_seconds", Help: "Time a statement that may take a snapshot waited for this node's commits, told to their sessions before their COMMIT PREPARED, to become visible (only statements that waited).", Buckets: buckets,
		}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_replica_apply_queue_length",
			Help: "Delivered entries waiting to be carried out on this node when the delivery loop last took work (its own batch included).",
		}),
		schemaMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_schema_mismatches_total",
			Help: "Other nodes' schema fingerprints that differed from this node's at the same position of the order.",
		}),
		schemaCompared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_schema_comparisons_total",
			Help: "Other nodes' schema fingerprints received, by result: consistent or different from this node's at the same position of the order, or unavailable (this node has none there: it restarted since, or its fingerprint failed; the node log says why).",
		}, []string{"result"}),
		schemaConsistent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_schema_consistent",
			Help: "1 if the latest schema fingerprint of every other node matched this node's, else 0.",
		}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_replica_votes_total",
			Help: "Votes this node sent on entries some node could not carry out, by vote: fail (this node could not), ok (it could).",
		}, []string{"vote"}),
		classChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_replica_class_changes_total",
			Help: "Changes of the conflict classes delivered, by result: applied, or refused (the result did not check out; refused alike by every node).",
		}, []string{"result"}),
		dataMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_data_mismatches_total",
			Help: "Other nodes' data checksums that differed from this node's at the same position of the order (a data check).",
		}),
		dataChecks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_data_checks_total",
			Help: "Data checks this node was delivered (each asks every node to checksum its tables at that position of the order).",
		}),
		dataConsistent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_data_consistent",
			Help: "1 if the latest data checksums of every other node matched this node's, else 0.",
		}),
		fragments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_replica_fragments_proposed_total",
			Help: "Fragments this node proposed for its transactions too large for one entry (max_entry_bytes).",
		}),
		fragmentBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_replica_fragment_bytes",
			Help: "Bytes of delivered fragments held until their transaction's outcome is delivered.",
		}),
		applied: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_replica_applied_prefix", Help: "The applied prefix: every entry up to this seqno is carried out locally.",
		}),
	}
	m.schemaConsistent.Set(1)
	m.dataConsistent.Set(1)
	if reg != nil {
		reg.MustRegister(m.outcomes, m.readKeys, m.writeRows, m.bruteForce, m.commitLatency, m.applyLatency, m.localCommit, m.toldWait, m.applied, m.queue, m.schemaMismatches, m.schemaCompared, m.schemaConsistent, m.dataMismatches, m.dataChecks, m.dataConsistent, m.votes, m.fragments, m.fragmentBytes, m.classChanges)
	}
	return m
}
