// Package castest gives each test its own bucket on a real S3-compatible
// server: the one `make test` started (FORGECI_TEST_S3_*), or a versitygw
// this test binary starts itself.
package castest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/s3local"
)

var (
	once     sync.Once
	base     cas.Config
	startErr error
)

// Config returns the server's settings with a fresh bucket name.
func Config(t testing.TB) cas.Config {
	t.Helper()
	once.Do(func() {
		if ep := os.Getenv("FORGECI_TEST_S3_ENDPOINT"); ep != "" {
			base = cas.Config{Endpoint: ep, AccessKey: os.Getenv("FORGECI_TEST_S3_ACCESS_KEY"),
				SecretKey: os.Getenv("FORGECI_TEST_S3_SECRET_KEY"), Region: os.Getenv("FORGECI_TEST_S3_REGION")}
			return
		}
		var srv *s3local.Server
		srv, startErr = s3local.Start(context.Background(), "", nil)
		if startErr == nil {
			base = cas.Config{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region}
		}
	})
	if startErr != nil {
		t.Fatalf("start S3 server for tests: %v", startErr)
	}
	cfg := base
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	cfg.Bucket = "t-" + hex.EncodeToString(b)
	cfg.PresignExpiry = time.Minute
	return cfg
}

// New returns a CAS on a new, empty bucket.
func New(t testing.TB) *cas.Store {
	t.Helper()
	st, err := cas.New(context.Background(), Config(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// Download GETs url (a presigned one, as the API hands out for a source,
// an artifact or a cache) and returns the body; anything but 200 fails
// the test.
func Download(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}
