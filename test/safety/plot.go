package safety

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"

	"github.com/ordo-db/ordo/test/safety/history"
)

// latencyPlot renders latency.svg: every operation as a point at its
// completion time and latency (log scale), coloured by outcome, over the
// fault windows shaded and named, Jepsen's latency-raw plot. It writes
// SVG by hand: nothing to install, and any browser shows it.
func latencyPlot(ops []history.Op, windows []window, stopped time.Duration, owner map[int]string) string {
	const (
		width, height = 1000.0, 420.0
		left, right   = 70.0, 20.0
		top, bottom   = 30.0, 50.0
	)
	plotW, plotH := width-left-right, height-top-bottom
	end := stopped
	if end <= 0 {
		end = time.Second
	}
	// Latency axis: decades from 1 ms to the first power of ten above the
	// slowest operation (at least 1 s).
	maxLat := time.Second
	for _, op := range ops {
		if op.Complete >= 0 && op.Complete-op.Invoke > maxLat {
			maxLat = op.Complete - op.Invoke
		}
	}
	lo, hi := 0.0, math.Ceil(math.Log10(float64(maxLat)/float64(time.Millisecond)))
	x := func(d time.Duration) float64 { return left + plotW*float64(d)/float64(end) }
	y := func(d time.Duration) float64 {
		ms := math.Max(float64(d)/float64(time.Millisecond), 1)
		return top + plotH*(1-(math.Log10(ms)-lo)/(hi-lo))
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for _, w := range windows {
		x0, x1 := x(w.Start), x(w.End)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4d03f" fill-opacity="0.25"/>`+"\n", x0, top, math.Max(x1-x0, 1), plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#7d6608">%s n%d</text>`+"\n", x0+2, top-6, html.EscapeString(w.Fault), w.Node)
	}
	// Axes and grid.
	for d := lo; d <= hi; d++ {
		lat := time.Duration(math.Pow(10, d)) * time.Millisecond
		yy := y(lat)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, left+plotW, yy)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, yy+4, lat)
	}
	step := time.Duration(math.Max(1, math.Round(end.Seconds()/10))) * time.Second
	for t := time.Duration(0); t <= end; t += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%ds</text>`+"\n", x(t), top+plotH+18, int(t.Seconds()))
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time since the start of the run (completion)</text>`+"\n", left+plotW/2, height-10)
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">latency</text>`+"\n", top+plotH/2)
	// Points, oks first so failures and indeterminate ones stay visible.
	colour := map[string]string{history.OK: "#1e8449", history.Fail: "#c0392b", history.Info: "#e67e22"}
	for _, typ := range []string{history.OK, history.Fail, history.Info} {
		fmt.Fprintf(&b, `<g fill="%s" fill-opacity="0.6">`+"\n", colour[typ])
		for _, op := range ops {
			if op.Type != typ || op.Complete < 0 || op.Complete > stopped || owner[op.Process] == "probe" {
				continue
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.6"/>`+"\n", x(op.Complete), y(op.Complete-op.Invoke))
		}
		b.WriteString("</g>\n")
	}
	for i, typ := range []string{history.OK, history.Fail, history.Info} {
		lx := left + plotW - 170 + float64(i)*60
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", lx, top+14, colour[typ], lx+7, top+18, typ)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
