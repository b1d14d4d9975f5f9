package cas_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
)

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func TestPutStatVerifyOpen(t *testing.T) {
	ctx := context.Background()
	st := castest.New(t)
	data := []byte("hello, content-addressed world\n")
	d := digestOf(data)
	if _, err := st.Stat(ctx, d); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("stat before put: %v", err)
	}
	if err := st.Put(ctx, d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Stat(ctx, d); err != nil || n != int64(len(data)) {
		t.Fatalf("stat: %d %v", n, err)
	}
	if err := st.Verify(ctx, d, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	// A second put of the same digest is a no-op, never an overwrite.
	if err := st.Put(ctx, d, strings.NewReader("other bytes entirely!!!!!!!!!!"), 30); err != nil {
		t.Fatal(err)
	}
	r, _, err := st.Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("blob was overwritten: %q", got)
	}
}

func TestVerifyDeletesMismatch(t *testing.T) {
	ctx := context.Background()
	st := castest.New(t)
	claimed := digestOf([]byte("the real thing"))
	if err := st.Put(ctx, claimed, strings.NewReader("a forgery"), 9); err != nil {
		t.Fatal(err)
	}
	if err := st.Verify(ctx, claimed, 9); !errors.Is(err, cas.ErrMismatch) {
		t.Fatalf("verify of forged blob: %v", err)
	}
	if _, err := st.Stat(ctx, claimed); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("forged blob still there: %v", err)
	}
}

// TestPresigned: a presigned PUT uploads exactly once (If-None-Match is
// signed, so a second PUT cannot overwrite) and a presigned GET downloads.
func TestPresigned(t *testing.T) {
	ctx := context.Background()
	st := castest.New(t)
	data := bytes.Repeat([]byte("x"), 1000)
	d := digestOf(data)
	up, err := st.PresignPut(ctx, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	put := func(body []byte) int {
		req, _ := http.NewRequest(up.Method, up.URL, bytes.NewReader(body))
		for k, v := range up.Headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := put(data); s != 200 {
		t.Fatalf("presigned put: %d", s)
	}
	if s := put(bytes.Repeat([]byte("y"), 1000)); s != http.StatusPreconditionFailed {
		t.Fatalf("second presigned put: %d, want 412", s)
	}
	get, err := st.PresignGet(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(get)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("presigned get: %d %q", resp.StatusCode, body[:min(20, len(body))])
	}
	// Tampering with the signed URL is refused (SigV4 is checked).
	resp, err = http.Get(strings.Replace(get, "X-Amz-Signature=", "X-Amz-Signature=00", 1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tampered presigned get: %d, want 403", resp.StatusCode)
	}
}
