// Package deployments holds the files an operator deploys Ordo with
// (deployments/compose, the image in deployments/docker, Prometheus scrape
// configurations and alert rules, the Grafana dashboard), and the one
// function the tests need from them: which metrics they use. It must never
// hold code a node runs.
package deployments

import (
	_ "embed"
	"regexp"
	"slices"
	"strings"
)

//go:embed grafana/dashboards/ordo.json
var dashboard string

//go:embed prometheus/ordo-alerts.yml
var alerts string

var metricName = regexp.MustCompile(`\bordo_[a-z_]+`)

// MetricNames returns the ordo_ metric families expr uses, a histogram's
// _bucket, _sum and _count series named by their family.
func MetricNames(expr string) []string {
	var names []string
	for _, m := range metricName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base := strings.TrimSuffix(m, suffix)
			if base != m && (strings.HasSuffix(base, "_seconds") || strings.HasSuffix(base, "_rows") || strings.HasSuffix(base, "_keys")) {
				m = base
			}
		}
		names = append(names, m)
	}
	return names
}

// UsedMetrics returns every ordo_ metric family the dashboard and the
// alert rules use, sorted, each once.
func UsedMetrics() []string {
	names := append(MetricNames(dashboard), MetricNames(alerts)...)
	slices.Sort(names)
	return slices.Compact(names)
}
