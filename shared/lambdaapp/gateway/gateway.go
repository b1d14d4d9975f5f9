// Package gateway is the cold start and the runtime adapter of the
// functions behind API Gateway: the API server over lambdaapp's backend,
// served to HTTP API (payload v2) events as a plain net/http handler. The
// functions without an HTTP route (admin, the scheduled ones) use
// lambdaapp alone, so that they neither link nor initialise the API's
// packages (the pipeline parser, the GitHub client, zstd): package
// initialisation is part of every cold start.
package gateway

import (
	"context"
	"net/http"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
)

// MustServer builds the backend (lambdaapp.MustBackend) and the API
// server over it at cold start, or exits on a configuration it cannot
// use.
func MustServer(ctx context.Context, connect lambdaapp.Connect) *api.Server {
	polls, err := LoadPolls()
	lambdaapp.MustNot(nil, "config", err)
	b := lambdaapp.MustBackend(ctx, connect)
	return &api.Server{Store: b.Store, CAS: b.CAS, Log: b.Log, Polls: polls}
}

// LoadPolls reads what idle runners are told: FORGECI_BUSY_POLL_SECONDS
// (default 2) and FORGECI_IDLE_POLL_SECONDS (default 20).
func LoadPolls() (api.Polls, error) {
	busy, err := lambdaapp.EnvSeconds("FORGECI_BUSY_POLL_SECONDS", 2, 60)
	if err != nil {
		return api.Polls{}, err
	}
	idle, err := lambdaapp.EnvSeconds("FORGECI_IDLE_POLL_SECONDS", 20, 300)
	return api.Polls{Busy: busy, Idle: idle}, err
}

// StartHTTP serves h to API Gateway HTTP API events. It does not return.
func StartHTTP(h http.Handler) {
	lambda.Start(httpadapter.NewV2(withGatewayID(h)).ProxyWithContext)
}

// withGatewayID gives each request API Gateway's request ID, which its
// access log has too.
func withGatewayID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc, ok := core.GetAPIGatewayV2ContextFromContext(r.Context()); ok && rc.RequestID != "" {
			r = api.WithRequestID(r, rc.RequestID)
		}
		h.ServeHTTP(w, r)
	})
}
