package apply

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/ordo-db/ordo/internal/capture"
)

// copyMinRows is the length of a run of inserts into one table from which
// the run is applied with one COPY rather than statement by statement (a
// variable for tests). Bulk loads (pgbench -i, data imports) are runs of
// hundreds of thousands of inserts; COPY parses the same text values with
// the same input functions, a few times faster.
var copyMinRows = 2000

// segment is a run of statements applied together: one COPY (copy), or
// statement chunks.
type segment struct {
	stmts []stmt
	copy  bool
}

// segments cuts stmts into runs of at least copyMinRows inserts into one
// table (same column list), applied by COPY, and the rest.
func segments(stmts []stmt) []segment {
	var out []segment
	rest := 0 // start of the statements not in a segment yet
	for i := 0; i < len(stmts); {
		j := i + 1
		if stmts[i].row != nil && stmts[i].row.Op == capture.OpInsert {
			for j < len(stmts) && stmts[j].sql == stmts[i].sql {
				j++
			}
			if j-i >= copyMinRows {
				if rest < i {
					out = append(out, segment{stmts: stmts[rest:i]})
				}
				out = append(out, segment{stmts: stmts[i:j], copy: true})
				rest = j
			}
		}
		i = j
	}
	if rest < len(stmts) {
		out = append(out, segment{stmts: stmts[rest:]})
	}
	return out
}

// copyRows applies a run of inserts into one table with COPY FROM STDIN
// (text format) on w, in the open transaction, under the lock watcher, and
// checks that every row went in. A table with triggers or rules that fire
// in replica mode (enabled ALWAYS or REPLICA) gets the statements instead:
// COPY fires a statement trigger once for the whole run and no rules.
// copied reports which was done.
func (a *Applier) copyRows(ctx context.Context, w *worker, seqno uint64, run []stmt, order *ordering, prep bool) (copied bool, err error) {
	t := run[0].row.Table
	var fires bool
	if err := w.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgenabled IN ('A', 'R'))
		OR EXISTS (SELECT 1 FROM pg_rewrite WHERE ev_class = $1::regclass AND rulename <> '_RETURN' AND ev_enabled IN ('A', 'R'))`,
		quoteTable(t)).Scan(&fires); err != nil {
		return false, fmt.Errorf("apply: triggers of %s: %w", t, err)
	}
	if fires {
		for i := 0; i < len(run); i += a.cfg.BatchSize {
			if err := a.execChunk(ctx, w, seqno, run[i:min(i+a.cfg.BatchSize, len(run))], order, prep); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = quoteCol(c.Name)
	}
	sql := "COPY " + quoteTable(t) + " (" + strings.Join(cols, ", ") + ") FROM STDIN"
	var buf bytes.Buffer
	for _, s := range run {
		for i, v := range s.row.Values {
			if i > 0 {
				buf.WriteByte('\t')
			}
			if v.Kind == capture.Null {
				buf.WriteString(`\N`)
				continue
			}
			copyEscape(&buf, v.Text)
		}
		buf.WriteByte('\n')
	}
	stop := a.watch(ctx, w, seqno, order, false)
	tag, err := w.conn.PgConn().CopyFrom(ctx, &buf, sql)
	stop()
	if err != nil {
		return false, fmt.Errorf("apply: copy %d rows into %s: %w", len(run), t, err)
	}
	if tag.RowsAffected() != int64(len(run)) {
		return false, fmt.Errorf("%w: copy into %s took %d rows, want %d", ErrDiverged, t, tag.RowsAffected(), len(run))
	}
	return true, nil
}

// copyEscape writes s as a value of COPY's text format.
func copyEscape(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteByte(c)
		}
	}
}
