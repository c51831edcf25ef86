package classes

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

func split(name, label string, tables ...string) *ordov1.ClassDef {
	c := &ordov1.ClassDef{Name: name, Label: label}
	for i := 0; i < len(tables); i += 2 {
		c.Tables = append(c.Tables, tables[i])
		c.Columns = append(c.Columns, &ordov1.TableColumn{Table: tables[i], Column: tables[i+1]})
	}
	return c
}

func TestApplyUpsertsDeletesAndChecks(t *testing.T) {
	e := &ordov1.ClassesEntry{
		Classes: []*ordov1.ClassDef{
			split("warehouse", "w", "public.warehouse", "w_id"),
			split("district", "w", "public.district", "d_w_id"),
			{Name: "item", Tables: []string{"public.item"}},
		},
		Profiles: []*ordov1.ProfileDef{{Name: "payment", Classes: "warehouse[w={w}], district[w={w}]"}},
	}
	cfg, err := Apply(nil, e, 7)
	require.NoError(t, err)
	require.Equal(t, uint64(7), cfg.Seqno)
	require.Equal(t, []string{"district", "item", "warehouse"}, names(cfg), "sorted, so every node shows the same")

	cs, err := Build(cfg)
	require.NoError(t, err)
	refs, err := Profile(cfg, cs, "payment(w=3)")
	require.NoError(t, err)
	require.Equal(t, "warehouse[w=3]", refs[0].String())
	require.Equal(t, "district[w=3]", refs[1].String())
	_, err = Profile(cfg, cs, "payment")
	require.ErrorContains(t, err, "needs a value for w")
	_, err = Profile(cfg, cs, "payment(w=1, d=2)")
	require.ErrorContains(t, err, `no parameter "d"`)
	_, err = Profile(cfg, cs, "new_order(w=1)")
	require.ErrorContains(t, err, "unknown transaction profile")

	// Upsert replaces, delete removes; the input is left alone.
	before := proto.Clone(cfg)
	cfg2, err := Apply(cfg, &ordov1.ClassesEntry{Classes: []*ordov1.ClassDef{{Name: "item", Tables: []string{"public.item", "public.stock"}}}, DeleteProfiles: []string{"payment"}}, 9)
	require.NoError(t, err)
	require.True(t, proto.Equal(before, cfg), "Apply modified the configuration in force")
	require.Len(t, cfg2.Classes, 3)
	require.Equal(t, []string{"public.item", "public.stock"}, cfg2.Classes[1].Tables)
	require.Empty(t, cfg2.Profiles)

	for name, bad := range map[string]*ordov1.ClassesEntry{
		"no schema":        {Classes: []*ordov1.ClassDef{{Name: "x", Tables: []string{"item"}}}},
		"split, no column": {Classes: []*ordov1.ClassDef{{Name: "x", Label: "w", Tables: []string{"public.x"}}}},
		"bad name":         {Classes: []*ordov1.ClassDef{{Name: "a b", Tables: []string{"public.x"}}}},
		"unknown class":    {Profiles: []*ordov1.ProfileDef{{Name: "p", Classes: "nosuch"}}},
		"delete unknown":   {DeleteClasses: []string{"nosuch"}},
		"column, no label": {Classes: []*ordov1.ClassDef{{Name: "x", Tables: []string{"public.x"}, Columns: []*ordov1.TableColumn{{Table: "public.x", Column: "w"}}}}},
		"in use":           {DeleteClasses: []string{"warehouse"}},
	} {
		_, err := Apply(cfg, bad, 10)
		require.ErrorIs(t, err, ErrInvalid, name)
	}
}

func names(cfg *ordov1.ClassConfig) []string {
	var out []string
	for _, c := range cfg.Classes {
		out = append(out, c.Name)
	}
	return out
}

// TestCatchAll: what a transaction that declares no classes takes is
// cluster configuration too: "*" by default, a declaration once set, back
// to "*" when set so; a catch-all naming an unknown class is refused, and
// so is deleting a class it names.
func TestCatchAll(t *testing.T) {
	cfg, err := Apply(nil, &ordov1.ClassesEntry{Classes: []*ordov1.ClassDef{
		{Name: "app", Tables: []string{"public.a", "public.b"}},
		{Name: "reports", Tables: []string{"public.r"}},
	}}, 3)
	require.NoError(t, err)
	cs, err := Build(cfg)
	require.NoError(t, err)
	refs, err := CatchAll(cfg, cs)
	require.NoError(t, err)
	require.Equal(t, "*", refString(refs), "the default: the whole database")

	cfg, err = Apply(cfg, &ordov1.ClassesEntry{CatchAll: " app "}, 4)
	require.NoError(t, err)
	require.Equal(t, "app", cfg.CatchAll)
	cs, err = Build(cfg)
	require.NoError(t, err)
	refs, err = CatchAll(cfg, cs)
	require.NoError(t, err)
	require.Equal(t, "app", refString(refs))

	next, err := Apply(cfg, &ordov1.ClassesEntry{Profiles: []*ordov1.ProfileDef{{Name: "p", Classes: "reports"}}}, 5)
	require.NoError(t, err)
	require.Equal(t, "app", next.CatchAll, "a change that does not name it keeps it")

	_, err = Apply(cfg, &ordov1.ClassesEntry{CatchAll: "nosuch"}, 6)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Apply(cfg, &ordov1.ClassesEntry{DeleteClasses: []string{"app"}}, 6)
	require.ErrorIs(t, err, ErrInvalid, "the catch-all names it")

	cfg, err = Apply(cfg, &ordov1.ClassesEntry{CatchAll: "*"}, 7)
	require.NoError(t, err)
	require.Empty(t, cfg.CatchAll, "back to the default")
}

func refString(refs []txn.ClassRef) string {
	var s []string
	for _, r := range refs {
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// TestGranuleEpochs: the granule columns of split classes change their
// epoch only when they change, and every node finds the epoch in force at
// any seqno from the configuration alone.
func TestGranuleEpochs(t *testing.T) {
	cfg, err := Apply(nil, &ordov1.ClassesEntry{Classes: []*ordov1.ClassDef{
		split("district", "w", "public.district", "d_w_id"),
		{Name: "item", Tables: []string{"public.item"}},
	}}, 10)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"public.district": "d_w_id"}, Granules(cfg))
	require.Equal(t, []uint64{10}, cfg.GranuleChanges)

	cfg, err = Apply(cfg, &ordov1.ClassesEntry{Profiles: []*ordov1.ProfileDef{{Name: "p", Classes: "item"}}}, 20)
	require.NoError(t, err)
	require.Equal(t, []uint64{10}, cfg.GranuleChanges, "a profile changes no granule")

	cfg, err = Apply(cfg, &ordov1.ClassesEntry{Classes: []*ordov1.ClassDef{split("stock", "w", "public.stock", "s_w_id")}}, 30)
	require.NoError(t, err)
	require.Equal(t, []uint64{10, 30}, cfg.GranuleChanges)
	for seqno, want := range map[uint64]uint64{5: 0, 10: 10, 29: 10, 30: 30, 99: 30} {
		require.Equal(t, want, GranuleSeqnoAt(cfg, seqno), "at %d", seqno)
	}

	// Two classes splitting one table on different columns: no granule.
	cfg, err = Apply(cfg, &ordov1.ClassesEntry{Classes: []*ordov1.ClassDef{split("stock2", "i", "public.stock", "s_i_id")}}, 40)
	require.NoError(t, err)
	require.NotContains(t, Granules(cfg), "public.stock")
	require.Equal(t, []uint64{10, 30, 40}, cfg.GranuleChanges)
	for i := range 20 {
		cfg, err = Apply(cfg, &ordov1.ClassesEntry{DeleteClasses: []string{"stock2"}}, uint64(50+2*i))
		require.NoError(t, err)
		cfg, err = Apply(cfg, &ordov1.ClassesEntry{Classes: []*ordov1.ClassDef{split("stock2", "i", "public.stock", "s_i_id")}}, uint64(51+2*i))
		require.NoError(t, err)
	}
	require.Len(t, cfg.GranuleChanges, 3+40, "every change kept, for replays")
	require.Equal(t, uint64(30), GranuleSeqnoAt(cfg, 39), "an old epoch is still found")
}
