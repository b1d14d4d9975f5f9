package lambdaapp_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
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
	"heartbeat": true, "logs": true, "oidc": true, "register": true, "source": true}

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
	var wg sync.WaitGroup
	for name, boot := range boots {
		if name == "hello" || name == "migrate" { // migrate connects per event, by design
			continue
		}
		dbURL := pgtest.NewDatabase(t)
		u, _ := url.Parse(dbURL)
		dbs[name] = strings.TrimPrefix(u.Path, "/")
		env := newLambdaEnv(t, dbURL, blobs)
		e, err := lambdatest.Start(ctx, bin, boot, env.vars)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
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

	// Watch the sessions until every early connection has been seen.
	seen := map[string]int{}
	for deadline := time.Now().Add(4 * time.Second); ; {
		for name, db := range dbs {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'forgeci'`,
				db).Scan(&n); err != nil {
				t.Fatal(err)
			}
			seen[name] = max(seen[name], n)
		}
		waiting := 0
		for name := range dbs {
			if connectsAtStart[name] && seen[name] == 0 {
				waiting++
			}
		}
		if waiting == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name := range dbs {
		want := 0
		if connectsAtStart[name] {
			want = 1
		}
		if seen[name] != want {
			t.Errorf("%s: held %d database sessions after a cold start whose event needs no query, want %d", name, seen[name], want)
		}
	}
}

// queryFreeEvent is an event name's function answers without a query: a
// path no route serves for HTTP functions, an unknown command for admin,
// a scheduled pass with nothing due for the scheduled ones.
func queryFreeEvent(name string) any {
	switch name {
	case "admin":
		return map[string]any{"command": "no-such-command"}
	case "sweeper", "gc", "scm", "scaler":
		return events.EventBridgeEvent{Version: "0", ID: "cold", DetailType: "Scheduled Event", Source: "aws.events",
			Time: time.Now(), Region: "us-east-1", Detail: json.RawMessage("{}")}
	}
	const path = "/no-such-route"
	return events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET " + path, RawPath: path,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "cold", DomainName: "cold.example",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: path}}}
}
