package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// DDL workload anomaly names.
const (
	DDLFinalDivergent = "ddl-final-divergent" // nodes' final schemas or rows differ
	DDLLostInsert     = "ddl-lost-insert"     // an acknowledged row missing at the end
	DDLFailedPresent  = "ddl-failed-present"  // a row or table of a failed transaction present at the end
	DDLLostTable      = "ddl-lost-table"      // an acknowledged CREATE TABLE missing (never dropped)
	DDLDroppedPresent = "ddl-dropped-present" // an acknowledged DROP TABLE's table present
	DDLRefusedPresent = "ddl-refused-present" // a column whose ADD was refused present at the end
	DDLNotRefused     = "ddl-not-refused"     // a volatile-default rewrite of a non-empty table committed
	DDLTimeZone       = "ddl-timezone"        // a timestamp not what the client's time zone makes it
)

// DDLOp is one operation of the DDL workload, with what it did when it
// committed.
type DDLOp struct {
	ID     int
	Node   int
	Status string // ok, fail or info
	// Inserts: table → the ids of the rows it inserted.
	Inserts map[string][]int
	// Create and Drop name a table it created or dropped (each table is
	// created once, by one client, and dropped at most once, by it).
	Create, Drop string
	// Refused names a column whose ADD COLUMN was refused (SQLSTATE
	// 0A000: a volatile default on a table with rows) and rolled back to
	// a savepoint; NotRefused one such ADD COLUMN that ran instead.
	Refused, NotRefused string
}

// DDLFinal is the final state of the workload's tables read through one
// node.
type DDLFinal struct {
	// Rows: table → ids, for every table of the workload present.
	Rows map[string][]int `json:"rows"`
	// Columns of the table columns are added to, "name type" in order.
	Columns []string `json:"columns"`
	// TimeZone lists values that are not what the client's time zone
	// makes of the literal they were written with.
	TimeZone []string `json:"tz,omitempty"`
}

// DDLResult is what CheckDDL found.
type DDLResult struct {
	Anomalies []Anomaly
	// OK, Failed, Info count the operations by outcome.
	OK, Failed, Info int
}

// CheckDDL checks the DDL workload's operations against the final state
// through every node (final[node]): every node ends with the same columns,
// tables and rows; every acknowledged row is present (in its table, unless
// the table was dropped), no failed one; every acknowledged CREATE TABLE's
// table is present unless a DROP of it may have committed, every
// acknowledged DROP's table is gone, a failed CREATE's table absent; no
// column whose ADD was refused exists; a volatile-default rewrite of a
// table with rows is never accepted; every timestamp is what the client's
// time zone makes it.
func CheckDDL(ops []DDLOp, final map[int]DDLFinal) DDLResult {
	var res DDLResult
	nodes := make([]int, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	for _, n := range nodes[min(1, len(nodes)):] {
		if d := ddlDiff(final[nodes[0]], final[n]); d != "" {
			res.Anomalies = append(res.Anomalies, Anomaly{DDLFinalDivergent, nil, fmt.Sprintf("node %d and node %d: %s", nodes[0], n, d)})
		}
	}
	dropped := map[string]bool{}      // a DROP that may have committed
	createFailed := map[string]bool{} // a CREATE that certainly did not
	for _, op := range ops {
		switch op.Status {
		case "ok":
			res.OK++
		case "fail":
			res.Failed++
		default:
			res.Info++
		}
		if op.Drop != "" && op.Status != "fail" {
			dropped[op.Drop] = true
		}
		if op.Create != "" && op.Status == "fail" {
			createFailed[op.Create] = true
		}
		if op.NotRefused != "" && op.Status != "fail" {
			res.Anomalies = append(res.Anomalies, Anomaly{DDLNotRefused, []int{op.ID}, fmt.Sprintf("T%d on node %d added column %s with a volatile default to a table with rows: it must be refused (0A000)", op.ID, op.Node, op.NotRefused)})
		}
	}
	for _, n := range nodes {
		f := final[n]
		rows := map[string]map[int]bool{}
		for t, ids := range f.Rows {
			rows[t] = map[int]bool{}
			for _, id := range ids {
				rows[t][id] = true
			}
		}
		cols := map[string]bool{}
		for _, c := range f.Columns {
			cols[strings.Fields(c)[0]] = true
		}
		var lost, failed []string
		for _, op := range ops {
			for t, ids := range op.Inserts {
				present, exists := rows[t]
				if !exists {
					continue // the table is gone (or never was): checked below
				}
				for _, id := range ids {
					switch {
					case op.Status == "ok" && !present[id]:
						lost = append(lost, fmt.Sprintf("%s %d (T%d)", t, id, op.ID))
					case op.Status == "fail" && present[id]:
						failed = append(failed, fmt.Sprintf("%s %d (T%d)", t, id, op.ID))
					}
				}
			}
			_, has := rows[op.Create]
			switch {
			case op.Create != "" && op.Status == "ok" && !dropped[op.Create] && !has:
				res.Anomalies = append(res.Anomalies, Anomaly{DDLLostTable, []int{op.ID}, fmt.Sprintf("node %d: table %s, created by T%d (acknowledged) and never dropped, is missing", n, op.Create, op.ID)})
			case op.Create != "" && op.Status == "fail" && has:
				res.Anomalies = append(res.Anomalies, Anomaly{DDLFailedPresent, []int{op.ID}, fmt.Sprintf("node %d: table %s is present, but T%d that created it failed", n, op.Create, op.ID)})
			}
			if _, has := rows[op.Drop]; op.Drop != "" && op.Status == "ok" && has {
				res.Anomalies = append(res.Anomalies, Anomaly{DDLDroppedPresent, []int{op.ID}, fmt.Sprintf("node %d: table %s is present, but T%d dropped it (acknowledged)", n, op.Drop, op.ID)})
			}
			if op.Refused != "" && cols[op.Refused] {
				res.Anomalies = append(res.Anomalies, Anomaly{DDLRefusedPresent, []int{op.ID}, fmt.Sprintf("node %d: column %s exists, but its ADD COLUMN (T%d) was refused", n, op.Refused, op.ID)})
			}
		}
		if len(lost) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{DDLLostInsert, nil, fmt.Sprintf("node %d: %d acknowledged rows missing: %v", n, len(lost), head(lost))})
		}
		if len(failed) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{DDLFailedPresent, nil, fmt.Sprintf("node %d: %d rows of failed transactions present: %v", n, len(failed), head(failed))})
		}
		if len(f.TimeZone) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{DDLTimeZone, nil, fmt.Sprintf("node %d: %d values not what the client's time zone makes them: %v", n, len(f.TimeZone), head(f.TimeZone))})
		}
	}
	return res
}

// ddlDiff says how two final states differ ("" if they do not).
func ddlDiff(a, b DDLFinal) string {
	var d []string
	if !slices.Equal(a.Columns, b.Columns) {
		d = append(d, fmt.Sprintf("columns %v vs %v", a.Columns, b.Columns))
	}
	tables := map[string]bool{}
	for t := range a.Rows {
		tables[t] = true
	}
	for t := range b.Rows {
		tables[t] = true
	}
	var ts []string
	for t := range tables {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	for _, t := range ts {
		ra, inA := a.Rows[t]
		rb, inB := b.Rows[t]
		switch {
		case inA != inB:
			d = append(d, fmt.Sprintf("table %s present on one only", t))
		case !slices.Equal(ra, rb):
			d = append(d, fmt.Sprintf("table %s: %d rows vs %d", t, len(ra), len(rb)))
		}
	}
	return strings.Join(d, "; ")
}
