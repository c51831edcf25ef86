package wire

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// syncHereHooks calls SyncHere before a statement containing "synchere",
// as Ordo's session does before a COMMIT among other statements of a batch.
type syncHereHooks struct{}

func (syncHereHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	return &syncHereSession{be: be}, nil
}

type syncHereSession struct{ be Backend }

func (s *syncHereSession) Statement(ctx context.Context, st *Statement) error {
	if strings.Contains(st.SQL, "synchere") {
		_, err := s.be.SyncHere(ctx)
		return err
	}
	return nil
}

func (s *syncHereSession) ReadyForQuery(byte) {}
func (s *syncHereSession) Close()             {}

// TestRejectionSurvivesTheAnswerBeforeIt: after an error earlier in the
// batch, SyncHere makes PostgreSQL skip the rest of the batch with a
// Describe of a rejection portal, whose 34000 the client must never see.
// The backend goroutine used to forget every rejection when the count of
// outstanding answers reached zero; a session goroutine woken by the reply
// to SyncHere's own Sync (before the count went down) could register the
// rejection in between, and the client then got `34000 portal
// "ordo_rejected_…" does not exist` (the session fuzzer, 1 round in about
// 40,000). afterAnswer holds the backend goroutine in that window.
func TestRejectionSurvivesTheAnswerBeforeIt(t *testing.T) {
	hold := func(ss *session) {
		ss.wakeWaiters()
		time.Sleep(20 * time.Millisecond)
	}
	afterAnswer.Store(&hold)
	defer afterAnswer.Store(nil)
	p := startProxy(t, syncHereHooks{}, nil)
	c := connect(t, p.superDSN(""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pc := c.PgConn()
	for i := 0; i < 5; i++ {
		for _, m := range []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "select 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "select 'synchere'"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Sync{},
		} {
			pc.Frontend().Send(m)
		}
		if err := pc.Frontend().Flush(); err != nil {
			t.Fatal(err)
		}
		var errs []string
		for {
			msg, err := pc.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := msg.(*pgproto3.ErrorResponse); ok {
				errs = append(errs, e.Code+" "+e.Message)
			}
			if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		if len(errs) != 1 || !strings.HasPrefix(errs[0], "22012") {
			t.Fatalf("round %d: want only PostgreSQL's 22012, got %q", i, errs)
		}
	}
}

// TestRejectionsAreBounded: rejections whose Describe PostgreSQL skipped
// are forgotten, oldest first, so a session keeps at most keptRejections.
func TestRejectionsAreBounded(t *testing.T) {
	ss := &session{}
	var names []string
	for i := 0; i < 3*keptRejections; i++ {
		names = append(names, ss.newRejection(nil))
	}
	if len(ss.rejects) != keptRejections || int(ss.nrejects.Load()) != keptRejections {
		t.Fatalf("%d rejections kept (count %d), want %d", len(ss.rejects), ss.nrejects.Load(), keptRejections)
	}
	for i, n := range names {
		_, kept := ss.rejects[n]
		if want := i >= len(names)-keptRejections; kept != want {
			t.Fatalf("rejection %d (%s) kept: %v, want %v", i, n, kept, want)
		}
	}
	if e, _ := ss.takeRejection(&pgproto3.ErrorResponse{Message: `portal "` + names[len(names)-1] + `" does not exist`}); e != silentRejection {
		t.Fatalf("the newest rejection was not found: %v", e)
	}
}
