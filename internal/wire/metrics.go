package wire

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Server's Prometheus metrics, ordo_wire_*.
type metrics struct {
	connsActive   prometheus.Gauge
	connsTotal    prometheus.Counter
	unauthed      prometheus.Gauge       // connections not yet authenticated
	connsRejected *prometheus.CounterVec // reason
	bytesIn       prometheus.Counter     // from clients
	bytesOut      prometheus.Counter     // to clients
	messagesIn    prometheus.Counter     // client messages
	messagesOut   prometheus.Counter     // messages to clients
	errors        *prometheus.CounterVec // kind: protocol, backend, auth, hook
	cancels       prometheus.Counter
	// unheld: conflicts a session asked to hold back (HoldConflicts)
	// relayed at once; reason: before_sync, not_last.
	unheld *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_wire_connections", Help: "Client sessions currently open."}),
		unauthed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordo_wire_unauthenticated_connections", Help: "Client connections not yet authenticated (startup, TLS, authentication)."}),
		connsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_wire_connections_total", Help: "Client connections accepted."}),
		connsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_wire_connections_rejected_total", Help: "Client connections refused, by reason."}, []string{"reason"}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_wire_client_received_bytes_total", Help: "Bytes received from clients after startup."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_wire_client_sent_bytes_total", Help: "Bytes sent to clients after startup."}),
		messagesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_wire_client_messages_total", Help: "Protocol messages received from clients after startup."}),
		messagesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_wire_backend_messages_total", Help: "Protocol messages relayed from PostgreSQL to clients after startup."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_wire_errors_total", Help: "Sessions ended or statements refused by an error, by kind."}, []string{"kind"}),
		cancels: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_wire_cancel_requests_total", Help: "CancelRequests received."}),
		unheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_wire_conflicts_relayed_unheld_total",
			Help: "Conflicts (40001, 40P01) of an autocommit statement that could have been run again, relayed to the client at once, by reason: before_sync (PostgreSQL's error came before the client's Sync was read), not_last (messages followed the failed Execute)."}, []string{"reason"}),
	}
	// Every label value starts at 0, so rates and alerts see each series
	// from the start rather than once the first event happens.
	for _, reason := range []string{"protocol", "tls", "tls_required", "shutdown", "max_conns",
		"startup_limit", "source_limit", "auth_timeout"} {
		m.connsRejected.WithLabelValues(reason)
	}
	for _, kind := range []string{"protocol", "backend", "auth", "hook"} {
		m.errors.WithLabelValues(kind)
	}
	for _, reason := range []string{"before_sync", "not_last"} {
		m.unheld.WithLabelValues(reason)
	}
	if reg != nil {
		reg.MustRegister(m.connsActive, m.unauthed, m.connsTotal, m.connsRejected, m.bytesIn, m.bytesOut,
			m.messagesIn, m.messagesOut, m.errors, m.cancels, m.unheld)
	}
	return m
}
