package main

import (
	"fmt"
	"html"
	"io"
	"math"
)

// bar is one configuration's medians, as plotted.
type bar struct {
	label   string // protocol/grain
	clients int
	tpmc    float64
	ratio   float64 // of direct PostgreSQL at the same clients
	abort   float64 // aborted attempts, %
}

// plotSVG draws two panels of bars, one group per client count: tpmC (with
// its ratio to direct PostgreSQL written on each bar) and the abort rate.
// It is a plain SVG file any browser shows.
func plotSVG(w io.Writer, title string, bars []bar) error {
	const (
		barW, gap, groupGap = 34.0, 6.0, 40.0
		panelH, top, left   = 220.0, 60.0, 70.0
		labelH              = 110.0
	)
	var groups []int
	byGroup := map[int][]bar{}
	for _, b := range bars {
		if _, ok := byGroup[b.clients]; !ok {
			groups = append(groups, b.clients)
		}
		byGroup[b.clients] = append(byGroup[b.clients], b)
	}
	width := left + 20
	for _, g := range groups {
		width += float64(len(byGroup[g]))*(barW+gap) + groupGap
	}
	width = math.Max(width, left+7*float64(len(title))) // room for the title
	height := top + 2*panelH + labelH + 60
	maxT := 1.0
	for _, b := range bars {
		maxT = math.Max(maxT, b.tpmc)
	}
	var err error
	p := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, height)
	p(`<text x="%.0f" y="22" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	panel := func(y0 float64, name string, value func(bar) float64, max float64, text func(bar) string) {
		p(`<text x="8" y="%.0f" transform="rotate(-90 8 %.0f)" text-anchor="end">%s</text>`+"\n", y0, y0, html.EscapeString(name))
		p(`<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", left, y0+panelH, width-20, y0+panelH)
		p(`<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", left-6, y0+8, max)
		p(`<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", left-6, y0+panelH)
		x := left + 10
		for _, g := range groups {
			for _, b := range byGroup[g] {
				h := panelH * value(b) / max
				fill := "#4878a8"
				if b.label == "direct" {
					fill = "#888"
				}
				p(`<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" fill="%s"/>`+"\n", x, y0+panelH-h, barW, h, fill)
				p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n", x+barW/2, y0+panelH-h-3, html.EscapeString(text(b)))
				x += barW + gap
			}
			x += groupGap
		}
	}
	panel(top, "tpmC (ratio to direct)", func(b bar) float64 { return b.tpmc }, maxT, func(b bar) string { return fmt.Sprintf("%.2f", b.ratio) })
	panel(top+panelH+30, "aborted attempts %", func(b bar) float64 { return b.abort }, 100, func(b bar) string { return fmt.Sprintf("%.0f", b.abort) })
	x := left + 10
	y := top + 2*panelH + 40
	for _, g := range groups {
		start := x
		for _, b := range byGroup[g] {
			p(`<text x="%.1f" y="%.1f" transform="rotate(60 %.1f %.1f)">%s</text>`+"\n", x+barW/2, y, x+barW/2, y, html.EscapeString(b.label))
			x += barW + gap
		}
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="12">%d clients per node</text>`+"\n", (start+x-gap)/2, y+labelH, g)
		x += groupGap
	}
	p("</svg>\n")
	return err
}
