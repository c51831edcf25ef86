package session

import (
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/capture"
)

// TestOrdoObjectsAreCapturesObjects: the analyzer refuses changes to
// Ordo's objects by name (it may not import the capture); the names must
// be the ones the capture creates.
func TestOrdoObjectsAreCapturesObjects(t *testing.T) {
	require.Equal(t, capture.OrdoSchema, analysis.OrdoSchema)
	require.Equal(t, capture.DefaultPublication, analysis.OrdoPublication)
	var created, refused []string
	for _, m := range regexp.MustCompile(`CREATE EVENT TRIGGER (\w+)`).FindAllStringSubmatch(capture.DDLTriggerSQL, -1) {
		created = append(created, m[1])
	}
	for name := range analysis.OrdoEventTriggers {
		refused = append(refused, name)
	}
	sort.Strings(created)
	sort.Strings(refused)
	require.NotEmpty(t, created)
	require.Equal(t, created, refused)
}
