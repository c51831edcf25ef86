package admin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/totalorder"
)

// fakeMembership is a group whose changes always commit.
type fakeMembership struct {
	mu      sync.Mutex
	members []totalorder.MemberInfo
	removed map[uint64]bool
	adds    int
}

func (m *fakeMembership) MemberInfos() []totalorder.MemberInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]totalorder.MemberInfo(nil), m.members...)
}

func (m *fakeMembership) LogPointAt(index uint64) (totalorder.LogPoint, error) {
	return totalorder.LogPoint{Index: index, Term: 1}, nil
}

func (m *fakeMembership) LastLogPoint() (totalorder.LogPoint, error) {
	return totalorder.LogPoint{Index: 1, Term: 1}, nil
}

func (m *fakeMembership) AddWitness(ctx context.Context, id uint64, addr string) error {
	if err := m.AddLearner(ctx, id, addr); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.members[len(m.members)-1].Witness = true
	return nil
}

func (m *fakeMembership) AddLearner(_ context.Context, id uint64, addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.removed[id] {
		return totalorder.ErrRemovedID
	}
	m.adds++
	m.members = append(m.members, totalorder.MemberInfo{ID: id, Learner: true, Addr: addr})
	return nil
}

func (m *fakeMembership) Promote(_ context.Context, id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.members {
		if m.members[i].ID == id {
			m.members[i].Learner = false
			return nil
		}
	}
	return errors.New("not a member")
}

func (m *fakeMembership) RemoveNode(_ context.Context, id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.members[:0]
	for _, mi := range m.members {
		if mi.ID != id {
			out = append(out, mi)
		}
	}
	m.members = out
	m.removed[id] = true
	return nil
}

func (m *fakeMembership) IsRemoved(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.removed[id]
}

// The member endpoints: list with roles and states, an idempotent add, a
// removal, and the refusals (bad input, a removed id, a second address,
// an unknown member, a node without membership).
func TestMemberEndpoints(t *testing.T) {
	o, r := healthy()
	m := &fakeMembership{removed: map[uint64]bool{},
		members: []totalorder.MemberInfo{{ID: 1, Addr: "10.0.0.1:7001"}, {ID: 2, Addr: "10.0.0.2:7001"}, {ID: 3, Addr: "10.0.0.3:7001"}}}
	s, err := New(Config{NodeID: 1, Order: o, Replica: r, Ready: NewReadiness(o, r), Membership: m,
		Auth: Auth{Token: StaticToken(token)}, Logger: quiet})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	c := client(t, srv.URL, token)
	ctx := context.Background()

	ms, err := c.Members(ctx)
	require.NoError(t, err)
	require.Len(t, ms.Members, 3)
	require.Equal(t, MemberRow{ID: 1, Role: "voter", Addr: "10.0.0.1:7001", State: "live", Applied: ptr(95), Behind: ptr(4)}, ms.Members[0])
	require.Equal(t, "live", ms.Members[1].State, "node 2 reported 90")
	require.True(t, ms.Members[1].Leader)
	require.Equal(t, "unreachable", ms.Members[2].State, "node 3 never reported")

	ms, err = c.AddMember(ctx, 4, "10.0.0.4:7001")
	require.NoError(t, err)
	require.Equal(t, "learner", ms.Members[3].Role)
	require.Equal(t, "joining", ms.Members[3].State, "a learner not heard from yet is copying")
	ms, err = c.AddWitness(ctx, 6, "10.0.0.6:7001")
	require.NoError(t, err)
	require.Equal(t, "learner (witness)", ms.Members[4].Role)
	_, err = c.AddMember(ctx, 4, "10.0.0.4:7001")
	require.NoError(t, err, "adding a member again is a no-op")
	require.Equal(t, 2, m.adds, "node 4 once, witness 6 once")
	var ae *APIError
	_, err = c.AddMember(ctx, 4, "10.0.0.9:7001")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusConflict, ae.Code)
	_, err = c.AddMember(ctx, 5, "no-port")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusBadRequest, ae.Code)
	_, err = c.AddMember(ctx, 0, "10.0.0.5:7001")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusBadRequest, ae.Code)

	ms, err = c.PromoteMember(ctx, 4)
	require.NoError(t, err)
	require.Equal(t, "voter", ms.Members[3].Role, "promoted")
	ms, err = c.PromoteMember(ctx, 4)
	require.NoError(t, err, "a voter is left as it is")
	require.Equal(t, "voter", ms.Members[3].Role)
	_, err = c.PromoteMember(ctx, 9)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusNotFound, ae.Code)

	ms, err = c.RemoveMember(ctx, 3)
	require.NoError(t, err)
	require.Len(t, ms.Members, 4, "1, 2, 4 and the witness 6")
	_, err = c.RemoveMember(ctx, 3)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusNotFound, ae.Code)
	_, err = c.AddMember(ctx, 3, "10.0.0.3:7001")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusConflict, ae.Code, "a removed id is never added again")

	// Without membership (or a donor) the endpoints say so.
	plain := client(t, newServer(t, o, r, nil).URL, token)
	_, err = plain.Members(ctx)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusNotImplemented, ae.Code)
	_, err = plain.StartTransfer(ctx, 0)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusNotImplemented, ae.Code)
}

func ptr(v uint64) *uint64 { return &v }
