package awsenv_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/forgeci/forgeci/shared/awsenv"
)

// verify re-signs the request as received, with the SDK's signer and the
// same credentials and time: AWS's own check of a Signature V4.
func verify(t *testing.T, r *http.Request, body []byte, service string) bool {
	t.Helper()
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return false
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	again.ContentLength = int64(len(body))
	// AWS checks the headers the signature names (the transport adds
	// others, such as Accept-Encoding, after signing).
	_, signed, _ := strings.Cut(r.Header.Get("Authorization"), "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	for _, h := range strings.Split(signed, ";") {
		if vs := r.Header.Values(h); h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = vs
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", SessionToken: "session"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), service, "eu-west-1", at); err != nil {
		t.Fatal(err)
	}
	return again.Header.Get("Authorization") == r.Header.Get("Authorization") &&
		r.Header.Get("X-Amz-Security-Token") == "session"
}

func setEnv(t *testing.T, url string) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "session")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", url)
}

// TestJSONCall: a JSON 1.1 call is signed as AWS checks it, carries its
// target, retries a server error and throttling, and reads the answer;
// an error answer becomes an *Error with its type and message, not
// retried when it is the caller's.
func TestJSONCall(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := calls.Add(1)
		switch {
		case !verify(t, r, body, "secretsmanager") || r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"__type":"InvalidSignatureException","message":"bad signature"}`)
		case strings.Contains(string(body), "missing"):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws#ResourceNotFoundException","Message":"no such secret"}`)
		case n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case n == 2:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"ThrottlingException","message":"slow down"}`)
		default:
			_, _ = io.WriteString(w, `{"SecretString":"s3cret","Name":"x"}`)
		}
	}))
	defer srv.Close()
	setEnv(t, srv.URL)
	c, err := awsenv.NewClient("secretsmanager", "SECRETS_MANAGER")
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ SecretString string }
	if err := c.JSON(context.Background(), "secretsmanager.GetSecretValue", map[string]string{"SecretId": "x"}, &out); err != nil || out.SecretString != "s3cret" {
		t.Fatalf("call: %+v %v (after %d requests)", out, err, calls.Load())
	}
	if calls.Load() != 3 {
		t.Fatalf("%d requests, want 3 (a 503 and a throttle retried)", calls.Load())
	}
	err = c.JSON(context.Background(), "secretsmanager.GetSecretValue", map[string]string{"SecretId": "missing"}, &out)
	var e *awsenv.Error
	if !errors.As(err, &e) || e.Type != "ResourceNotFoundException" || e.Message != "no such secret" || calls.Load() != 4 {
		t.Fatalf("missing secret: %v (%d requests)", err, calls.Load())
	}
}
