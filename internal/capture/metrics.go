package capture

import "github.com/prometheus/client_golang/prometheus"

// metrics are the capture's Prometheus metrics.
type metrics struct {
	unreplicated prometheus.Counter
	prepared     prometheus.Counter
	refused      prometheus.Counter
	applies      prometheus.Counter
	restarts     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		unreplicated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_capture_unreplicated_commits_total",
			Help: "Local commits that were neither a prepared transaction Ordo decided nor an apply (writes that bypassed Ordo).",
		}),
		prepared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_capture_prepared_total",
			Help: "Prepared transactions decoded.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_capture_refused_total",
			Help: "Prepared transactions whose write set was refused (over the limits, or a table without a primary key).",
		}),
		applies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_capture_applies_total",
			Help: "Commits recognised as applies of remote write sets (they wrote _ordo.applied).",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_capture_stream_restarts_total",
			Help: "Times the replication stream was reconnected after an error.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.unreplicated, m.prepared, m.refused, m.applies, m.restarts)
	}
	return m
}
