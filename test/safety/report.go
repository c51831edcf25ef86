package safety

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ordo-db/ordo/test/safety/history"
)

// report checks the history and renders report.txt.
func (r *run) report() *Report {
	events := r.rec.Events()
	var summaries []string
	for _, w := range r.workloads {
		forbidden, summary := w.check(r, events)
		summaries = append(summaries, summary)
		for _, a := range forbidden {
			r.problem("%s: forbidden under %s: %s", w.name(), r.model(), a)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	verdict := "PASS"
	if len(r.problems) > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "ordo safety run: %s\n", verdict)
	level := ""
	if r.cfg.Serializable {
		level = " (transactions at SERIALIZABLE)"
	}
	fmt.Fprintf(&b, "protocol %s%s; workloads %s; nemeses %s; duration %s; %d clients per workload; seed %d\n",
		r.cfg.Protocol, level, strings.Join(r.cfg.Workloads, ","), orNone(r.cfg.Nemeses), r.cfg.Duration, r.cfg.Clients, r.seed)
	fmt.Fprintf(&b, "history: history.jsonl (%d events); latency plot: latency.svg; node logs: cluster/node*.log\n\n", len(events))

	fmt.Fprintf(&b, "problems (%d):\n", len(r.problems))
	for _, p := range r.problems {
		fmt.Fprintf(&b, "  - %s\n", indent(p))
	}
	b.WriteString("\nchecks:\n")
	for _, s := range summaries {
		fmt.Fprintf(&b, "  %s\n", s)
	}

	fmt.Fprintf(&b, "  %s\n", indent(r.resolved.String()))

	ops := history.Pair(events)
	b.WriteString("\noperations by outcome (ok / fail / info; info resolved by the outcome check as aborted count as fail):\n")
	type key struct{ w, f string }
	counts := map[key]map[string]int{}
	for _, op := range ops {
		k := key{r.owner[op.Process], op.F}
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][op.Type]++
	}
	var keys []key
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].w+keys[i].f < keys[j].w+keys[j].f })
	for _, k := range keys {
		c := counts[k]
		fmt.Fprintf(&b, "  %-8s %-14s %6d / %6d / %6d\n", k.w, k.f, c[history.OK], c[history.Fail], c[history.Info])
	}

	b.WriteString("\nnemesis windows:\n")
	if len(r.windows) == 0 {
		b.WriteString("  none\n")
	}
	for _, w := range r.windows {
		fmt.Fprintf(&b, "  %7.1fs – %7.1fs  %-12s node %d  %s\n", w.Start.Seconds(), w.End.Seconds(), w.Fault, w.Node, w.Note)
	}
	b.WriteString("\nevents:\n")
	if len(r.notes) == 0 {
		b.WriteString("  none\n")
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	b.WriteString("\n" + r.timeline(ops))
	return &Report{Dir: r.cfg.Dir, Problems: append([]string(nil), r.problems...), Text: b.String()}
}

// timeline renders, per second, the operations completed by outcome and
// their latency, with the faults active in that second marked.
func (r *run) timeline(ops []history.Op) string {
	type bucket struct {
		ok, fail, info int
		lat            []time.Duration
	}
	var buckets []bucket
	for _, op := range ops {
		if op.Complete < 0 || op.Complete > r.stopped || r.owner[op.Process] == "probe" {
			continue
		}
		s := int(op.Complete / time.Second)
		for len(buckets) <= s {
			buckets = append(buckets, bucket{})
		}
		bk := &buckets[s]
		switch op.Type {
		case history.OK:
			bk.ok++
		case history.Fail:
			bk.fail++
		default:
			bk.info++
		}
		bk.lat = append(bk.lat, op.Complete-op.Invoke)
	}
	var b strings.Builder
	b.WriteString("latency over time (per second of the run: completions ok/fail/info, p50 and max latency; the bar is p50 on a log scale; F = a fault was active):\n")
	for s, bk := range buckets {
		var p50, mx time.Duration
		if len(bk.lat) > 0 {
			sort.Slice(bk.lat, func(i, j int) bool { return bk.lat[i] < bk.lat[j] })
			p50, mx = bk.lat[len(bk.lat)/2], bk.lat[len(bk.lat)-1]
		}
		var faults []string
		for _, w := range r.windows {
			if w.Start < time.Duration(s+1)*time.Second && w.End > time.Duration(s)*time.Second {
				faults = append(faults, fmt.Sprintf("%s n%d", w.Fault, w.Node))
			}
		}
		mark := " "
		if len(faults) > 0 {
			mark = "F"
		}
		bar := 0
		for d := time.Millisecond; d <= p50 && bar < 20; d *= 2 {
			bar++
		}
		fmt.Fprintf(&b, "  %4ds %s %4d/%3d/%3d  p50 %8s  max %8s  %-20s %s\n", s, mark, bk.ok, bk.fail, bk.info,
			p50.Round(time.Millisecond), mx.Round(time.Millisecond), strings.Repeat("#", bar), strings.Join(faults, ", "))
	}
	return b.String()
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}
