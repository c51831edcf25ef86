package join

import "github.com/prometheus/client_golang/prometheus"

// Phases of a join, in order (ordo_join_phase).
var phases = []string{"check", "member", "snapshot", "roles", "schema", "data", "sequences", "indexes", "done"}

type metrics struct {
	phase       *prometheus.GaugeVec
	seqno       prometheus.Gauge
	tables      prometheus.Gauge
	tablesDone  prometheus.Counter
	rows, bytes prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ordo_join_phase",
			Help: "1 for the phase of the state transfer this node is in (check, member, snapshot, roles, schema, data, sequences, indexes, done), 0 for the others.",
		}, []string{"phase"}),
		seqno: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_join_snapshot_seqno",
			Help: "The applied prefix of the donor's snapshot this node copies (it replays the order after it).",
		}),
		tables: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_join_tables",
			Help: "Tables the state transfer copies.",
		}),
		tablesDone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_join_tables_copied_total",
			Help: "Tables the state transfer has copied.",
		}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_join_rows_copied_total",
			Help: "Rows the state transfer has copied.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_join_bytes_copied_total",
			Help: "Bytes of COPY data the state transfer has copied.",
		}),
	}
	for _, p := range phases {
		m.phase.WithLabelValues(p)
	}
	if reg != nil {
		reg.MustRegister(m.phase, m.seqno, m.tables, m.tablesDone, m.rows, m.bytes)
	}
	return m
}

func (m *metrics) enter(phase string) {
	for _, p := range phases {
		v := 0.0
		if p == phase {
			v = 1
		}
		m.phase.WithLabelValues(p).Set(v)
	}
}
