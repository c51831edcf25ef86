package session

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSequenceReplay(t *testing.T) {
	up := func(last int64, called bool) seqPos { return seqPos{last: last, called: called, up: true} }
	before := seqState{
		`public.a`: up(101, true), `public.b`: up(2, false), `public.c`: up(5, true),
		`public.d`: {last: -1, called: false}, `public.e`: up(1, true), `public.f`: up(7, false),
	}
	after := seqState{
		`public.a`:   up(101, true),            // unchanged
		`public.b`:   up(2000, true),           // forward (pg_dump's setval of a loaded table)
		`public.c`:   up(5, false),             // back: the same value, not handed out yet
		`public.d`:   {last: -1, called: true}, // descending: exactly
		`public.e`:   up(math.MaxInt64, true),  // forward to the end
		`public.f`:   up(2, false),             // back (setval(…, 2, false) after a restore)
		`public.new`: up(1, false),             // created in the transaction: DDL
	}
	require.Equal(t, []string{
		`SELECT pg_catalog.setval('public.b', 2000, true) FROM public.b WHERE CASE WHEN is_called THEN last_value::numeric + 1 ELSE last_value END < 2001`,
		`SELECT pg_catalog.setval('public.c', 5, false)`,
		`SELECT pg_catalog.setval('public.d', -1, true)`,
		`SELECT pg_catalog.setval('public.e', 9223372036854775807, true) FROM public.e WHERE CASE WHEN is_called THEN last_value::numeric + 1 ELSE last_value END < 9223372036854775808`,
		`SELECT pg_catalog.setval('public.f', 2, false)`,
	}, sequenceReplay(before, after))
}
