package kick_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/scm/kick"
)

// TestKick: the hook invokes the named function asynchronously
// (InvocationType Event), signed for Lambda in the function's region.
func TestKick(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Header.Set("X-Test-Body", string(body))
		got <- r
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ENDPOINT_URL_LAMBDA", srv.URL)
	hook, err := kick.Lambda(context.Background(), "stack-scm", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	hook(context.Background())
	r := <-got
	if r.Method != "POST" || r.URL.Path != "/2015-03-31/functions/stack-scm/invocations" || r.Header.Get("X-Amz-Invocation-Type") != "Event" {
		t.Fatalf("request %s %s %v", r.Method, r.URL.Path, r.Header)
	}
	if a := r.Header.Get("Authorization"); !strings.Contains(a, "/eu-west-1/lambda/aws4_request") {
		t.Fatalf("not signed for Lambda: %q", a)
	}
	if b := r.Header.Get("X-Test-Body"); !strings.Contains(b, `"source"`) || strings.Contains(b, "aws.events") {
		t.Fatalf("payload %q: the scm function must see a kick, not a schedule", b)
	}
	if h, _ := kick.Lambda(context.Background(), "", slog.Default()); h != nil {
		t.Fatal("no function named: no hook")
	}
}
