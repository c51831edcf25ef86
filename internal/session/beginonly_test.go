package session

import "testing"

// TestBeginsWithBegin: the cheap test before a text is analyzed for
// beginOnly lets through every way of writing BEGIN or START TRANSACTION
// that PostgreSQL accepts at the start of a text (a text it turns away
// waits for the commits told before it, as every statement did), and
// turns away what cannot be one.
func TestBeginsWithBegin(t *testing.T) {
	for _, sql := range []string{
		"BEGIN", "begin", "Begin;", "  BEGIN ISOLATION LEVEL SERIALIZABLE",
		"\n\tbegin transaction read only", "\r\n\fSTART TRANSACTION", "start transaction isolation level repeatable read",
		"BEGIN WORK", "beginx", // (the analysis turns this one away)
	} {
		if !beginsWithBegin(sql) {
			t.Errorf("beginsWithBegin(%q) = false, want true", sql)
		}
	}
	for _, sql := range []string{
		"", "   ", "BEGI", "SELECT 1", "/* c */ BEGIN", "-- c\nBEGIN", "(BEGIN)", "END", "COMMIT", "ROLLBACK", "ABORT",
	} {
		if beginsWithBegin(sql) {
			t.Errorf("beginsWithBegin(%q) = true, want false", sql)
		}
	}
}
