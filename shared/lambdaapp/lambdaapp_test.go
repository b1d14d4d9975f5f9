package lambdaapp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/lambdaapp/lambdatest"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestAdapterV2: the heartbeat function's handler, driven by API Gateway
// HTTP API v2 events as Lambda delivers them, accepts the current lease and
// fences a stale one, with the path parameter taken from the raw path.
func TestAdapterV2(t *testing.T) {
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, st, "p")
	srv := &api.Server{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	proxy := httpadapter.NewV2(srv.Handler("heartbeat")).ProxyWithContext

	reg, _, _ := st.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	_, token, err := st.RegisterRunner(ctx, reg, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	runner, _ := st.AuthenticateRunner(ctx, token)
	if _, err := st.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "j"}}}); err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, runner, nil, 0)
	if err != nil || c == nil {
		t.Fatal(err)
	}
	event := func(l domain.Lease) events.APIGatewayV2HTTPRequest {
		body, _ := json.Marshal(map[string]any{"lease": l})
		path := "/v1/runner/jobs/" + c.Lease.JobID + "/heartbeat"
		return lambdatest.HTTPRequest("req-1", "POST /v1/runner/jobs/{job_id}/heartbeat", path,
			map[string]string{"authorization": "Bearer " + token, "content-type": "application/json"}, string(body))
	}
	resp, err := proxy(ctx, event(c.Lease))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("current lease: %+v %v", resp, err)
	}
	var hb struct {
		CancelRequested *bool  `json:"cancel_requested"`
		ExpiresAt       string `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &hb); err != nil || hb.CancelRequested == nil || hb.ExpiresAt == "" {
		t.Fatalf("heartbeat body %q", resp.Body)
	}
	stale := c.Lease
	stale.Generation = 7
	resp, err = proxy(ctx, event(stale))
	if err != nil || resp.StatusCode != 409 {
		t.Fatalf("stale lease: %+v %v", resp, err)
	}
}
