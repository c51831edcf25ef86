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

func TestPairAppliesResolutions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	r, err := Create(path)
	require.NoError(t, err)
	r.Invoke(0, 1, "add", 1, "p0-1")
	c1 := r.Record(Info, 0, 1, "add", nil, "08007 unknown")
	r.Invoke(1, 2, "add", 2, "p1-1")
	c2 := r.Record(Info, 1, 2, "add", nil, "connection lost")
	r.Invoke(2, 3, "add", 3, "p2-1")
	r.Record(Info, 2, 3, "add", nil, "timeout")
	r.Record(Info, ResolverProcess, 0, "resolve", Resolution{Index: c1.Index, Label: "p0-1", Outcome: Aborted}, "")
	r.Record(Info, ResolverProcess, 0, "resolve", Resolution{Index: c2.Index, Label: "p1-1", Outcome: Committed}, "")
	require.NoError(t, r.Close())
	events, err := Load(path)
	require.NoError(t, err)
	ops := Pair(events)
	require.Len(t, ops, 3, "resolve events are not operations")
	require.Equal(t, Fail, ops[0].Type, "resolved aborted")
	require.Equal(t, "p0-1", ops[0].Label)
	require.Contains(t, ops[0].Error, "outcome check answered aborted")
	require.Equal(t, Info, ops[1].Type, "resolved committed stays info: what it read is unknown")
	require.Equal(t, Committed, ops[1].Outcome)
	require.Equal(t, Info, ops[2].Type)
	require.Equal(t, "", ops[2].Outcome, "never asked")
}
