package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/localstack"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// The idle benchmark: four runner slots waiting on a stack with no job,
// its sweeper and collector invoked on their schedules, as in AWS (idle
// polls answered at once and told when to ask again). Beside it, the
// same on a stack without wake-up hints (long polls of the database, the
// sweeper asking it every time, pools keeping idle connections): the
// stack as it was.
var (
	idleWindow  = 150 * time.Second
	idleMinutes = 10 * time.Minute
)

const (
	idleSlots  = 4
	sweepEvery = 5 * time.Second // the local stack's; a minute in AWS
	busyPoll   = 2 * time.Second
	idlePoll   = 20 * time.Second
)

type idleStack struct {
	stack  *localstack.Stack
	drop   func()
	url    string // the database's
	srv    *httptest.Server
	client *client.Client
	hints  bool
	claims chan time.Time
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func startIdleStack(ctx context.Context, admin, name string, hints bool) (*idleStack, error) {
	url, drop, err := freshDatabase(ctx, admin, name)
	if err != nil {
		return nil, err
	}
	stack, err := localstack.Start(ctx, localstack.Options{DatabaseURL: url, MaxConns: 8, NoBoard: !hints,
		KeepIdleConns: !hints, WakeGrain: time.Second, S3: cas.Config{Bucket: "bench-" + strings.ReplaceAll(name, "_", "-"),
			Endpoint: os.Getenv("FORGECI_TEST_S3_ENDPOINT"), AccessKey: os.Getenv("FORGECI_TEST_S3_ACCESS_KEY"),
			SecretKey: os.Getenv("FORGECI_TEST_S3_SECRET_KEY"), Region: os.Getenv("FORGECI_TEST_S3_REGION")}})
	if err != nil {
		drop()
		return nil, err
	}
	s := &idleStack{stack: stack, drop: drop, url: url, hints: hints, claims: make(chan time.Time, 16)}
	if _, err := stack.Store.CreateProject(ctx, "bench", "main"); err != nil {
		s.close()
		return nil, err
	}
	srv := stack.Server(nil)
	srv.Polls = api.Polls{Busy: busyPoll, Idle: idlePoll} // as in AWS: no poll held open
	s.srv = httptest.NewServer(srv.Handler())
	reg, _, err := stack.Store.CreateRegistrationToken(ctx, time.Minute, "bench", store.Scope{Untrusted: true})
	if err != nil {
		s.close()
		return nil, err
	}
	_, token, err := stack.Store.RegisterRunner(ctx, reg, "bench", nil)
	if err != nil {
		s.close()
		return nil, err
	}
	s.client = client.New(s.srv.URL, token)
	wctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	for range idleSlots {
		s.wg.Add(1)
		go s.slot(wctx)
	}
	s.wg.Add(1)
	go s.schedules(wctx)
	return s, nil
}

// slot is one runner slot's loop (agent.worker's protocol): it passes
// each job it claims at once.
func (s *idleStack) slot(ctx context.Context) {
	defer s.wg.Done()
	var poll client.Poll
	for ctx.Err() == nil {
		var c *protocol.Claim
		var err error
		if s.hints {
			if poll.After > 0 && sleepCtx(ctx, poll.After) != nil {
				return
			}
			c, poll, err = s.client.ClaimIdle(ctx, nil, 20*time.Second, poll.Hint)
		} else {
			c, err = s.client.Claim(ctx, nil, 20*time.Second)
		}
		if err != nil {
			_ = sleepCtx(ctx, time.Second)
			continue
		}
		if c != nil {
			s.claims <- time.Now()
			_ = s.client.Hold(c.Lease).Complete(ctx, domain.OutcomePassed, 0, "")
		}
	}
}

// schedules invokes the sweeper every sweepEvery and the collector every
// minute, each through scheduled.Run (without hints: every time).
func (s *idleStack) schedules(ctx context.Context) {
	defer s.wg.Done()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := s.stack.Store
	sw := &scheduled.Sweeper{Store: st, Log: log}
	gc := scheduled.GC(st, 10*time.Second, log)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n%12 == 11 {
			_, _ = scheduled.Run(ctx, st, wake.GC, gc)
		}
		_, _ = scheduled.Run(ctx, st, wake.Sweep, sw.Pass)
	}
}

// job queues one job and returns how long until a slot claimed it.
func (s *idleStack) job(ctx context.Context, name string) (time.Duration, error) {
	if _, err := s.stack.Store.CreateRun(ctx, store.NewRun{Project: "bench", Jobs: []store.NewJob{{Name: name,
		Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}}); err != nil {
		return 0, err
	}
	queued := time.Now()
	select {
	case at := <-s.claims:
		return at.Sub(queued), nil
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("%s: no slot claimed the job", name)
	}
}

func (s *idleStack) close() {
	if s.stop != nil {
		s.stop()
		s.wg.Wait()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	s.stack.Close()
	s.drop()
}

// dbCounts reads the database's transactions so far and the client
// connections to it (this one's excepted).
// counts are a database's cumulative transactions (autovacuum's among
// them) and client sessions, and the client connections open now.
type counts struct {
	xacts, sessions int64
	conns           int
}

func (c counts) minus(d counts) counts {
	return counts{xacts: c.xacts - d.xacts, sessions: c.sessions - d.sessions, conns: c.conns}
}

func dbCount(ctx context.Context, url string) (counts, error) {
	var c counts
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return c, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
        (SELECT sessions FROM pg_stat_database WHERE datname = current_database()),
        (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                                                 AND backend_type = 'client backend')`).Scan(&c.xacts, &c.sessions, &c.conns)
	return c, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// benchIdle measures the two stacks side by side (see idleStack).
func benchIdle(ctx context.Context, admin string, _ int) ([]row, error) {
	hinted, err := startIdleStack(ctx, admin, "bench_idle", true)
	if err != nil {
		return nil, err
	}
	defer hinted.close()
	before, err := startIdleStack(ctx, admin, "bench_idle_before", false)
	if err != nil {
		return nil, err
	}
	defer before.close()
	// Work first, then the quiet after it: the queue hint settles and the
	// notes the work left are consumed (the collector's within a minute).
	for _, s := range []*idleStack{hinted, before} {
		if _, err := s.job(ctx, "warm"); err != nil {
			return nil, err
		}
	}
	lastJob := time.Now()
	time.Sleep(wake.QueueSettle + 70*time.Second)
	xacts, err := idleXacts(ctx, admin, []*idleStack{hinted, before})
	if err != nil {
		return nil, err
	}
	held, err := dbCount(ctx, hinted.url)
	if err != nil {
		return nil, err
	}
	// The stack as it was, after its last request: stop its slots and
	// sweeper, wait 30 s, count what its pool still holds.
	before.stop()
	before.wg.Wait()
	time.Sleep(30 * time.Second)
	heldBefore, err := dbCount(ctx, before.url)
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Until(lastJob.Add(idleMinutes)))
	afterIdle, err := hinted.job(ctx, "after-idle")
	if err != nil {
		return nil, err
	}
	busy, err := hinted.job(ctx, "busy")
	if err != nil {
		return nil, err
	}
	control, hintedC, beforeC := xacts[0], xacts[1], xacts[2]
	return []row{
		{name: fmt.Sprintf("idle: client sessions held or opened in %s, %d idle slots", idleWindow, idleSlots),
			figure: float64(hintedC.sessions + int64(hintedC.conns)), baseline: float64(beforeC.sessions + int64(beforeC.conns)),
			unit: "sessions", baselineName: "without wake-up hints", atMost: 0, hasAtMost: true},
		{name: fmt.Sprintf("idle: DB transactions in %s (autovacuum's: untouched db %d)", idleWindow, control.xacts),
			figure: float64(hintedC.xacts), baseline: float64(beforeC.xacts), unit: "xacts", baselineName: "without wake-up hints"},
		{name: "idle: connections held 30 s after the last request", figure: float64(held.conns), baseline: float64(heldBefore.conns),
			unit: "conns", baselineName: "pool keeping idle conns", atMost: 0, hasAtMost: true},
		{name: fmt.Sprintf("pickup of the first job after %s idle (polls as in AWS)", idleMinutes),
			figure: afterIdle.Seconds() * 1000, baseline: busy.Seconds() * 1000, unit: "ms",
			baselineName: "pickup while busy", atMost: float64((idlePoll + time.Second).Milliseconds()), hasAtMost: true},
	}, nil
}

// idleXacts counts, over idleWindow, each stack's database and an
// untouched one migrated alike: client sessions opened, and those held as
// the window began (any work of ForgeCI's needs one), and transactions
// (autovacuum's among them, which the untouched database shows), less
// what counting itself costs.
func idleXacts(ctx context.Context, admin string, stacks []*idleStack) ([]counts, error) {
	own, err := countCost(ctx, admin)
	if err != nil {
		return nil, err
	}
	control, drop, err := freshDatabase(ctx, admin, "bench_idle_control")
	if err != nil {
		return nil, err
	}
	defer drop()
	urls := []string{control}
	for _, s := range stacks {
		urls = append(urls, s.url)
	}
	start := make([]counts, len(urls))
	for i, u := range urls {
		if start[i], err = dbCount(ctx, u); err != nil {
			return nil, err
		}
	}
	time.Sleep(idleWindow)
	time.Sleep(2 * time.Second) // backends report within a second of idling
	out := make([]counts, len(urls))
	for i, u := range urls {
		end, err := dbCount(ctx, u)
		if err != nil {
			return nil, err
		}
		out[i] = end.minus(start[i]).minus(own)
		out[i].conns = start[i].conns // held as the window began
	}
	return out, nil
}

// countCost is what one count adds to a database's counts, measured on
// one nothing else uses.
func countCost(ctx context.Context, admin string) (counts, error) {
	url, drop, err := freshDatabase(ctx, admin, "bench_idle_count")
	if err != nil {
		return counts{}, err
	}
	defer drop()
	a, err := dbCount(ctx, url)
	if err != nil {
		return counts{}, err
	}
	time.Sleep(2 * time.Second)
	b, err := dbCount(ctx, url)
	return b.minus(a), err
}
