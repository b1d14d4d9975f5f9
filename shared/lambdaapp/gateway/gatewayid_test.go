package gateway

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/forgeci/forgeci/shared/api"
)

// TestGatewayRequestID: a request that came through API Gateway carries
// the gateway's request ID, whatever the caller's X-Request-Id says.
func TestGatewayRequestID(t *testing.T) {
	var got string
	h := withGatewayID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = api.RequestID(r)
		w.WriteHeader(http.StatusNoContent)
	}))
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/", Headers: map[string]string{"x-request-id": "someone-elses"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "gw-7", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/"}}}
	if _, err := httpadapter.NewV2(h).ProxyWithContext(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if got != "gw-7" {
		t.Errorf("the request's ID is %q, want the gateway's", got)
	}
}
