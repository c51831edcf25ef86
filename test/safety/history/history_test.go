package history

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecordLoadPair(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	r, err := Create(path)
	require.NoError(t, err)
	r.Record(Invoke, 0, 1, "add", 1, "")
	r.Record(Invoke, 1, 2, "add", 2, "")
	r.Record(Info, NemesisProcess, 2, "nemesis", map[string]string{"fault": "kill"}, "")
	r.Record(OK, 1, 2, "add", nil, "")
	r.Record(Fail, 0, 1, "add", nil, "40001 could not serialize")
	r.Record(Invoke, 0, 1, "read", nil, "")
	r.Record(OK, 0, 1, "read", []int{2}, "")
	r.Record(Invoke, 1, 2, "add", 3, "")
	require.NoError(t, r.Close())

	events, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, r.Events(), events)
	ops := Pair(events)
	require.Len(t, ops, 4)
	require.Equal(t, "add", ops[0].F)
	require.Equal(t, OK, ops[0].Type)
	require.JSONEq(t, "2", string(ops[0].Value), "the invocation's value when the completion has none")
	require.Equal(t, Fail, ops[1].Type)
	require.Equal(t, "40001 could not serialize", ops[1].Error)
	require.JSONEq(t, "[2]", string(ops[2].Value))
	require.Equal(t, Info, ops[3].Type, "never completed")
	require.EqualValues(t, -1, ops[3].Complete)
}
