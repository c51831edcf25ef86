package checker

import (
	"fmt"
	"sort"
	"strings"
)

// Edge kinds of the dependency graph, a bit mask (two transactions may be
// related in several ways).
const (
	WW uint8 = 1 << iota // write-write: T2 appended the next version after T1's
	WR                   // write-read: T2 read what T1 wrote
	RW                   // read-write (anti-dependency): T1 read a version T2 overwrote
)

func kindName(k uint8) string {
	var parts []string
	for _, p := range []struct {
		bit  uint8
		name string
	}{{WW, "ww"}, {WR, "wr"}, {RW, "rw"}} {
		if k&p.bit != 0 {
			parts = append(parts, p.name)
		}
	}
	return strings.Join(parts, "+")
}

// graph is a dependency graph between transactions (by id).
type graph struct {
	out map[int]map[int]uint8
}

func newGraph() *graph { return &graph{out: map[int]map[int]uint8{}} }

func (g *graph) add(from, to int, kind uint8) {
	if from == to {
		return
	}
	m := g.out[from]
	if m == nil {
		m = map[int]uint8{}
		g.out[from] = m
	}
	m[to] |= kind
	if g.out[to] == nil {
		g.out[to] = map[int]uint8{}
	}
}

func (g *graph) nodes() []int {
	ns := make([]int, 0, len(g.out))
	for n := range g.out {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

func (g *graph) succ(n int, mask uint8, in map[int]bool) []int {
	var s []int
	for m, k := range g.out[n] {
		if k&mask != 0 && (in == nil || in[m]) {
			s = append(s, m)
		}
	}
	sort.Ints(s)
	return s
}

// sccs returns the strongly connected components with more than one node
// of the subgraph of nodes in (nil: all) and edges of mask (Tarjan).
func (g *graph) sccs(in map[int]bool, mask uint8) [][]int {
	index := map[int]int{}
	low := map[int]int{}
	onStack := map[int]bool{}
	var stack []int
	var out [][]int
	next := 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.succ(v, mask, in) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var comp []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			if len(comp) > 1 {
				sort.Ints(comp)
				out = append(out, comp)
			}
		}
	}
	for _, v := range g.nodes() {
		if in != nil && !in[v] {
			continue
		}
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return out
}

// path returns a shortest path from a to b (both included) over edges of
// mask inside in, or nil.
func (g *graph) path(a, b int, mask uint8, in map[int]bool) []int {
	prev := map[int]int{a: a}
	queue := []int{a}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.succ(v, mask, in) {
			if _, seen := prev[w]; seen {
				continue
			}
			prev[w] = v
			if w == b {
				p := []int{b}
				for x := b; x != a; {
					x = prev[x]
					p = append(p, x)
				}
				for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
					p[i], p[j] = p[j], p[i]
				}
				return p
			}
			queue = append(queue, w)
		}
	}
	return nil
}

// cycle returns a cycle (first node repeated at the end) over edges of mask
// inside in, or nil.
func (g *graph) cycle(in map[int]bool, mask uint8) []int {
	comps := g.sccs(in, mask)
	if len(comps) == 0 {
		return nil
	}
	comp := set(comps[0])
	a := comps[0][0]
	for _, b := range g.succ(a, mask, comp) {
		if p := g.path(b, a, mask, comp); p != nil {
			return append([]int{a}, p...)
		}
	}
	return nil
}

// describe renders a cycle with its edge kinds, restricted to mask.
func (g *graph) describe(c []int, mask uint8, name func(int) string) (string, int) {
	var b strings.Builder
	rws := 0
	for i := 0; i+1 < len(c); i++ {
		k := g.out[c[i]][c[i+1]] & mask
		// Name the strongest kind that holds: ww, then wr, then rw.
		switch {
		case k&WW != 0:
			k = WW
		case k&WR != 0:
			k = WR
		default:
			k = RW
			rws++
		}
		fmt.Fprintf(&b, "%s -%s-> ", name(c[i]), kindName(k))
	}
	b.WriteString(name(c[len(c)-1]))
	return b.String(), rws
}

func set(ns []int) map[int]bool {
	m := make(map[int]bool, len(ns))
	for _, n := range ns {
		m[n] = true
	}
	return m
}
