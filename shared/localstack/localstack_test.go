package localstack_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/localstack"
	"github.com/forgeci/forgeci/shared/pgtest"
)

// TestStartFailsCleanly: a stack whose S3 cannot be reached is an error,
// with what was already opened closed, not a panic.
func TestStartFailsCleanly(t *testing.T) {
	s, err := localstack.Start(context.Background(), localstack.Options{DatabaseURL: pgtest.NewDatabase(t),
		S3: cas.Config{Endpoint: "http://127.0.0.1:1", AccessKey: "x", SecretKey: "x", Region: "us-east-1"}})
	if err == nil || s != nil {
		t.Fatalf("Start with an unreachable S3: %v, %v", s, err)
	}
}

// TestStartServes: a stack over a database and the test S3 serves the
// API on its listener, and Close stops it.
func TestStartServes(t *testing.T) {
	ctx := context.Background()
	s, err := localstack.Start(ctx, localstack.Options{DatabaseURL: pgtest.NewDatabase(t), S3: castest.Config(t)})
	if err != nil {
		t.Fatal(err)
	}
	url, err := s.Serve("127.0.0.1:0", s.Server(nil))
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/v1/me")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/me without a token: %d, want 401", resp.StatusCode)
	}
	s.Close()
	if _, err := http.Get(url + "/v1/me"); err == nil {
		t.Error("the stack still serves after Close")
	}
}
