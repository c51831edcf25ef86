package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/totalorder"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// feedOrder delivers what the test sends and records proposals. A fake is
// enough: the tests are of the tally a waiting node keeps, not of the
// order.
type feedOrder struct {
	deliveries chan totalorder.Delivery
	mu         sync.Mutex
	proposed   []*ordov1.Entry
}

func (o *feedOrder) Propose(ctx context.Context, payload []byte) (uint64, error) {
	e, err := decodeEntry(payload)
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.proposed = append(o.proposed, e)
	return uint64(len(o.proposed)), nil
}
func (o *feedOrder) Deliveries() <-chan totalorder.Delivery        { return o.deliveries }
func (o *feedOrder) MarkApplied(uint64)                            {}
func (o *feedOrder) ReadIndex(ctx context.Context) (uint64, error) { return 0, nil }

func decodeEntry(payload []byte) (*ordov1.Entry, error) {
	var e ordov1.Entry
	return &e, proto.Unmarshal(payload, &e)
}

func voteDelivery(t *testing.T, seqno, at uint64, origin, node uint32, ok bool) totalorder.Delivery {
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Vote{Vote: &ordov1.VoteEntry{AtSeqno: at, Node: node, Ok: ok, Origin: origin}}})
	require.NoError(t, err)
	return totalorder.Delivery{Seqno: seqno, Type: totalorder.DeliveryEntry, Data: payload}
}

func membersDelivery(seqno uint64, voters ...uint64) totalorder.Delivery {
	var b []byte
	for _, v := range voters {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return totalorder.Delivery{Seqno: seqno, Type: totalorder.DeliveryMembers, Data: b}
}

// waitingNode is node 3 of three, about to wait for a verdict; feed sends
// what the order delivers meanwhile.
func waitingNode(t *testing.T, feed ...totalorder.Delivery) *Replica {
	order := &feedOrder{deliveries: make(chan totalorder.Delivery, len(feed))}
	for _, d := range feed {
		order.deliveries <- d
	}
	r, err := New(Config{NodeID: 3, Members: 3, Protocol: DBSMSI, Order: order})
	require.NoError(t, err)
	t.Cleanup(r.bg.Wait)
	return r
}

func await(t *testing.T, r *Replica, seqno uint64, origin uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := r.awaitVerdict(ctx, seqno, "ordo_1_7", origin, errors.New("no row"))
	require.NotErrorIs(t, err, context.DeadlineExceeded, "no verdict")
	return err
}

// TestVerdictOfATieLeftByARemovedVoter: node 3 fails entry 10 of node 1,
// node 1 answers that it applied it, and node 2 is removed before it
// votes. One against one among two voters is a tie, which the origin's
// side wins: node 3 leaves. It used to wait for good (the tally was only
// taken again on a vote).
func TestVerdictOfATieLeftByARemovedVoter(t *testing.T) {
	r := waitingNode(t,
		voteDelivery(t, 11, 10, 1, 3, false),
		voteDelivery(t, 12, 10, 1, 1, true),
		membersDelivery(13, 1, 3))
	err := await(t, r, 10, 1)
	require.ErrorContains(t, err, "leaves the cluster")
	require.Len(t, r.held, 3, "what it read is held for the loop")
}

// TestReadAheadMembersDoNotCountForEarlierVotes: what a waiting node reads
// ahead is tallied apart. Here a fourth voter is added after a vote on
// another entry (8); the loop steps that vote later and must count it
// under the three members every other node counted it under, not the four
// read ahead.
func TestReadAheadMembersDoNotCountForEarlierVotes(t *testing.T) {
	r := waitingNode(t,
		voteDelivery(t, 11, 8, 2, 1, true),
		membersDelivery(12, 1, 2, 3, 4),
		voteDelivery(t, 13, 10, 1, 3, false),
		voteDelivery(t, 14, 10, 1, 1, true),
		voteDelivery(t, 15, 10, 1, 2, true),
		voteDelivery(t, 16, 10, 1, 4, true))
	r.votes.Add(8, 2, 2, true) // stepped before: node 2 answered a failure on entry 8
	err := await(t, r, 10, 1)
	require.ErrorContains(t, err, "leaves the cluster")
	require.Equal(t, 3, r.votes.Members(), "the loop's tally is untouched by what was read ahead")
	require.NoError(t, r.deliverVote(mustVote(t, r.held[0])))
	require.Equal(t, "Applied", verdictName(r, 8), "two of three, as every other node counted it")
}

// TestWaitingHoldsBoundedBytes: beyond maxHeldBytes a waiting node only
// counts what it reads; it still reaches the verdict.
func TestWaitingHoldsBoundedBytes(t *testing.T) {
	defer func(n int) { maxHeldBytes = n }(maxHeldBytes)
	maxHeldBytes = 100
	var feed []totalorder.Delivery
	for i := range 20 {
		feed = append(feed, voteDelivery(t, uint64(11+i), 9, 1, 2, false)) // votes on another entry: held, not counted
	}
	feed = append(feed, voteDelivery(t, 40, 10, 1, 1, true), voteDelivery(t, 41, 10, 1, 2, true))
	r := waitingNode(t, feed...)
	err := await(t, r, 10, 1)
	require.ErrorContains(t, err, "leaves the cluster")
	held := 0
	for _, d := range r.held {
		held += len(d.Data)
	}
	require.LessOrEqual(t, held, maxHeldBytes)
	require.Less(t, len(r.held), len(feed))
}

// TestNoVerdictWithinTheBoundLeaves: node 3 fails entry 10, node 1
// carried it out, and node 2 (down) never votes: one against one of three
// voters decides nothing. The node used to wait for as long as node 2
// was away; after VoteTimeout it leaves with the steps to rejoin.
func TestNoVerdictWithinTheBoundLeaves(t *testing.T) {
	r := waitingNode(t,
		voteDelivery(t, 11, 10, 1, 3, false),
		voteDelivery(t, 12, 10, 1, 1, true))
	r.cfg.VoteTimeout = 200 * time.Millisecond
	err := await(t, r, 10, 1)
	require.ErrorContains(t, err, "no verdict on entry 10 within vote_timeout")
	require.ErrorContains(t, err, "1 of 3 voters carried it out")
	require.ErrorContains(t, err, "--rejoin")
}

func mustVote(t *testing.T, d totalorder.Delivery) *ordov1.VoteEntry {
	e, err := decodeEntry(d.Data)
	require.NoError(t, err)
	require.NotNil(t, e.GetVote())
	return e.GetVote()
}

func verdictName(r *Replica, seqno uint64) string {
	return [...]string{"Undecided", "Applied", "Skipped"}[r.votes.Verdict(seqno)]
}

// TestResourceHint: a node stopped by a full disk says so, whatever
// PostgreSQL's message (a short write names no cause).
func TestResourceHint(t *testing.T) {
	short := &pgconn.PgError{Code: "53100", Message: `could not extend file "base/5/16440": wrote only 4096 of 8192 bytes at block 755`}
	require.Contains(t, resourceHint(fmt.Errorf("apply: %w", short)), "disk is full")
	require.Contains(t, resourceHint(&pgconn.PgError{Code: "53200"}), "out of memory")
	require.Empty(t, resourceHint(&pgconn.PgError{Code: "57P01"}))
	require.Empty(t, resourceHint(errors.New("connection reset")))
}
