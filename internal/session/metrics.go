package session

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Commit stages, as labels of ordo_session_commit_stage_seconds.
const (
	stageProbe     = "probe"     // what did the transaction write?
	stagePrepare   = "prepare"   // PREPARE TRANSACTION (a WAL flush)
	stageCapture   = "capture"   // the decoded write set arrives
	stageTerminate = "terminate" // proposed, ordered, certified, committed
)

// How an update transaction's write probe ran, as labels of
// ordo_session_prepares_total (terminate.go, prepareAtOnce).
const (
	probedWithPrepare = "with_prepare" // in the PREPARE's round trip
	probedApart       = "apart"        // in a round trip of its own
	probedFellBack    = "fell_back"    // _ordo.prepare_check refused: apart
)

type metrics struct {
	stages    *prometheus.HistogramVec
	prepares  *prometheus.CounterVec
	retries   prometheus.Counter
	unretried *prometheus.CounterVec // reason (retry.go)
	syncReads prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ordo_session_commit_stage_seconds",
			Help:    "Time spent in each stage of committing an update transaction: probe, prepare, capture, terminate.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18), // 50µs … 6.5s
		}, []string{"stage"}),
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_session_prepares_total",
			Help: "Commits Ordo terminated (a COMMIT, a wrapped autocommit statement) by how the write probe ran: with_prepare (in the PREPARE's round trip, for a transaction that changed rows), apart (in a round trip of its own), fell_back (the check in the PREPARE's round trip refused, then apart).",
		}, []string{"probe"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_session_autocommit_retries_total",
			Help: "Autocommit statements run again after a replication conflict aborted them (autocommit_retries).",
		}),
		unretried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_session_autocommit_conflicts_unretried_total",
			Help: "Conflicts of autocommit statements that could have been run again (autocommit_retries) and reached the client, by reason: rows_sent (the client read some of an attempt), not_idle, statement_changed, result_changed, recorded, exhausted (every attempt aborted), disabled (autocommit_retries 0), canceled (the client canceled it while it waited to run again).",
		}, []string{"reason"}),
		syncReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_session_sync_reads_total",
			Help: "Transactions that waited for the cluster's latest commits before their snapshot (ordo.read_consistency = 'sync').",
		}),
	}
	for _, stage := range []string{stageProbe, stagePrepare, stageCapture, stageTerminate} {
		m.stages.WithLabelValues(stage) // exported from the start
	}
	for _, how := range []string{probedWithPrepare, probedApart, probedFellBack} {
		m.prepares.WithLabelValues(how)
	}
	for _, reason := range []string{unretriedRowsSent, unretriedNotIdle, unretriedChanged, unretriedResult, unretriedRecorded, unretriedExhausted, unretriedDisabled} {
		m.unretried.WithLabelValues(reason)
	}
	if reg != nil {
		reg.MustRegister(m.stages, m.prepares, m.retries, m.unretried, m.syncReads)
	}
	return m
}

// since observes the time since t under stage and returns now.
func (m *metrics) since(stage string, t time.Time) time.Time {
	now := time.Now()
	m.stages.WithLabelValues(stage).Observe(now.Sub(t).Seconds())
	return now
}
