package lambdaapp_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/lambdaapp/lambdatest"
	"github.com/forgeci/forgeci/shared/pgtest"
)

// connectsAtStart are the functions every event of which queries: they
// open their first connection at cold start (lambdaapp.ConnectAtStart).
// The others must not, or an idle stack would hold connections: claim's
// idle polls and the scheduled passes with nothing due cold-start too.
var connectsAtStart = map[string]bool{"admin": true, "api": true, "artifacts": true, "cache": true, "complete": true,
	"heartbeat": true, "logs": true, "register": true, "source": true}

// Each function is cold-started, in its own database, with an event that
// needs no query. Those that connect at start then hold one session; the
// others hold none while the first ones' connections come up.
func TestColdStartConnections(t *testing.T) {
	bin, boots := rie(t), built(t)
	ctx := context.Background()
	blobs := castest.Config(t)
	if bs, err := cas.New(ctx, blobs); err != nil {
		t.Fatal(err)
	} else if err := bs.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	dbs := map[string]string{} // function: its database's name
	emus := map[string]*lambdatest.Emulator{}
	for name, boot := range boots {
		// migrate's events come only with deploys; TestLambdaMigrations.
		if name == "hello" || name == "migrate" {
			continue
		}
		dbURL := pgtest.NewDatabase(t)
		u, _ := url.Parse(dbURL)
		dbs[name] = strings.TrimPrefix(u.Path, "/")
		e, err := lambdatest.Start(ctx, bin, boot, newLambdaEnv(t, dbURL, blobs).vars)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
		emus[name] = e
	}

	// Sessions are watched from before the first invoke: an early
	// connection closes after 5 idle seconds, and cold starts on a loaded
	// machine can take longer than that.
	invoked := make(chan struct{})
	seen := make(chan map[string]int)
	go func() { seen <- watchSessions(t, admin, dbs, invoked) }()
	var wg sync.WaitGroup
	for name, e := range emus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _, err := e.Invoke(ctx, queryFreeEvent(name))
			if err != nil && name != "admin" { // admin answers an unknown command with an error
				t.Errorf("%s: %v", name, err)
			} else if strings.Contains(string(out), `"statusCode":5`) {
				t.Errorf("%s answered %s", name, out)
			}
		}()
	}
	wg.Wait()
	close(invoked)
	held := <-seen
	for name := range dbs {
		want := 0
		if connectsAtStart[name] {
			want = 1
		}
		if held[name] != want {
			t.Errorf("%s: held %d database sessions after a cold start whose event needs no query, want %d", name, held[name], want)
		}
	}
}

// watchSessions returns the most sessions each function's database held
// at once, watched until every function that connects at start was seen
// with one and a second has passed since the invokes ended, or 15 s.
func watchSessions(t *testing.T, admin *pgx.Conn, dbs map[string]string, invoked <-chan struct{}) map[string]int {
	names := make([]string, 0, len(dbs))
	fn := map[string]string{}
	for name, db := range dbs {
		names, fn[db] = append(names, db), name
	}
	most := map[string]int{}
	var settled time.Time
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rows, err := admin.Query(context.Background(), `SELECT datname, count(*) FROM pg_stat_activity
			WHERE application_name = 'forgeci' AND datname = ANY ($1) GROUP BY datname`, names)
		if err != nil {
			t.Error(err)
			return most
		}
		for rows.Next() {
			var db string
			var n int
			if err := rows.Scan(&db, &n); err == nil {
				most[fn[db]] = max(most[fn[db]], n)
			}
		}
		rows.Close()
		select {
		case <-invoked:
			if settled.IsZero() {
				settled = time.Now()
				deadline = settled.Add(15 * time.Second)
			}
		default:
			continue
		}
		missing := false
		for name := range dbs {
			missing = missing || connectsAtStart[name] && most[name] == 0
		}
		if !missing && time.Since(settled) > time.Second {
			break
		}
	}
	return most
}

// queryFreeEvent is an event name's function answers without a query: a
// path no route serves for HTTP functions, an unknown command for admin,
// a scheduled pass with nothing due for the scheduled ones.
func queryFreeEvent(name string) any {
	switch name {
	case "admin":
		return map[string]any{"command": "no-such-command"}
	case "sweeper", "gc", "scm", "scaler":
		return lambdatest.Scheduled("cold")
	}
	return lambdatest.HTTPRequest("cold", "GET /no-such-route", "/no-such-route", nil, "")
}
