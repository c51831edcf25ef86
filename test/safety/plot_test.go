package safety

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/test/safety/history"
)

// TestLatencyPlot: the plot is well-formed SVG with one point per client
// operation completed before the workloads stopped (and three in the
// legend), and names each fault window.
func TestLatencyPlot(t *testing.T) {
	ops := []history.Op{
		{Process: 0, Type: history.OK, Invoke: 0, Complete: 3 * time.Millisecond},
		{Process: 1, Type: history.Fail, Invoke: time.Second, Complete: 2 * time.Second},
		{Process: 1, Type: history.Info, Invoke: 2 * time.Second, Complete: 9 * time.Second},
		{Process: 0, Type: history.Info, Invoke: 3 * time.Second, Complete: -1},              // never completed
		{Process: 0, Type: history.OK, Invoke: 11 * time.Second, Complete: 12 * time.Second}, // after the stop
		{Process: 2, Type: history.OK, Invoke: time.Second, Complete: 2 * time.Second},       // the probe
	}
	owner := map[int]string{0: "sets", 1: "sets", 2: "probe"}
	windows := []window{{Fault: "partition", Node: 2, Start: 2 * time.Second, End: 6 * time.Second}}
	svg := latencyPlot(ops, windows, 10*time.Second, owner)
	d := xml.NewDecoder(strings.NewReader(svg))
	circles := 0
	for {
		tok, err := d.Token()
		if err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	require.Equal(t, 3+3, circles)
	require.Contains(t, svg, "partition n2")
	require.Contains(t, svg, ">10s<", "the time axis reaches the stop")
}
