package apply

import "github.com/prometheus/client_golang/prometheus"

// metrics are the applier's Prometheus metrics.
type metrics struct {
	applied prometheus.Counter
	skipped prometheus.Counter
	rows    prometheus.Counter
	retries prometheus.Counter
	blocked prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_apply_write_sets_total", Help: "Write sets applied and committed."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_apply_skipped_total", Help: "Write sets skipped because _ordo.applied already proved them."}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_apply_rows_total", Help: "Row changes applied."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_apply_retries_total", Help: "Apply attempts rolled back and retried."}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_apply_blocked_total", Help: "Times OnBlocked was called with local backends blocking an apply."}),
	}
	if reg != nil {
		reg.MustRegister(m.applied, m.skipped, m.rows, m.retries, m.blocked)
	}
	return m
}
