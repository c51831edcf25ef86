package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlotSVG: the plot is well-formed XML with a bar, a ratio and a
// label per configuration.
func TestPlotSVG(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, plotSVG(&b, "TPC-C <3 warehouses>", []bar{
		{label: "direct", clients: 1, tpmc: 900, ratio: 1, abort: 2},
		{label: "dbsm/warehouse", clients: 1, tpmc: 300, ratio: 0.33, abort: 20},
		{label: "direct", clients: 8, tpmc: 4000, ratio: 1, abort: 60},
		{label: "cons/table", clients: 8, tpmc: 500, ratio: 0.125, abort: 0},
	}))
	dec := xml.NewDecoder(&b)
	rects := 0
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
		if cd, ok := tok.(xml.CharData); ok {
			texts = append(texts, string(cd))
		}
	}
	require.Equal(t, 8, rects, "two panels of four bars")
	all := strings.Join(texts, "|")
	for _, want := range []string{"TPC-C <3 warehouses>", "0.33", "dbsm/warehouse", "cons/table", "8 clients per node"} {
		require.Contains(t, all, want)
	}
}
