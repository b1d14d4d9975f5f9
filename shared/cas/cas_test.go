package cas_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
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

// TestPutCheckOpen: Put stores a blob with its SHA-256 as the object's
// checksum, Check confirms it from one HEAD, a second Put never overwrites,
// and S3 itself refuses bytes that do not hash to the key's digest.
func TestPutCheckOpen(t *testing.T) {
	ctx := context.Background()
	st := castest.New(t)
	data := []byte("hello, content-addressed world\n")
	d := digestOf(data)
	key := cas.BlobKey("p1", true, d)
	if _, _, err := st.Stat(ctx, key); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("stat before put: %v", err)
	}
	if err := st.Check(ctx, key, d, int64(len(data))); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("check before put: %v", err)
	}
	if err := st.Put(ctx, key, d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if n, sum, err := st.Stat(ctx, key); err != nil || n != int64(len(data)) || sum == "" {
		t.Fatalf("stat: %d %q %v", n, sum, err)
	}
	if err := st.Check(ctx, key, d, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(ctx, key, d, int64(len(data))+1); !errors.Is(err, cas.ErrMismatch) {
		t.Fatalf("check with a wrong size: %v", err)
	}
	other := digestOf([]byte("other"))
	if err := st.Check(ctx, key, other, int64(len(data))); !errors.Is(err, cas.ErrMismatch) {
		t.Fatalf("check with a wrong digest: %v", err)
	}
	// A second put of the same digest is a no-op, never an overwrite.
	if err := st.Put(ctx, key, d, strings.NewReader("other bytes entirely!!!!!!!!!!"), 30); err != nil {
		t.Fatal(err)
	}
	r, _, err := st.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("blob was overwritten: %q", got)
	}
	// A forgery never lands: S3 checks the body against the checksum.
	claimed := digestOf([]byte("the real thing"))
	fkey := cas.BlobKey("p1", true, claimed)
	if err := st.Put(ctx, fkey, claimed, strings.NewReader("a forgery"), 9); err == nil {
		t.Fatal("S3 stored bytes that do not match their checksum")
	}
	if _, _, err := st.Stat(ctx, fkey); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("forged blob is there: %v", err)
	}
}

// TestBlobKeys: keys are namespaced by project and trust tier.
func TestBlobKeys(t *testing.T) {
	d := digestOf([]byte("x"))
	hex := strings.TrimPrefix(d, "sha256:")
	if got := cas.BlobKey("p1", true, d); got != "p/p1/trusted/sha256/"+hex {
		t.Errorf("trusted key %s", got)
	}
	if got := cas.BlobKey("p1", false, d); got != "p/p1/untrusted/sha256/"+hex {
		t.Errorf("untrusted key %s", got)
	}
}

// TestPresigned: a presigned PUT uploads exactly once (If-None-Match is
// signed, so a second PUT cannot overwrite), only the bytes of its digest
// (the checksum is signed: other bytes or a dropped header are refused),
// and a presigned GET downloads.
func TestPresigned(t *testing.T) {
	ctx := context.Background()
	st := castest.New(t)
	data := bytes.Repeat([]byte("x"), 1000)
	d := digestOf(data)
	key := cas.BlobKey("p1", false, d)
	up, err := st.PresignPut(ctx, key, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	put := func(body []byte, drop ...string) int {
		req, _ := http.NewRequest(up.Method, up.URL, bytes.NewReader(body))
		for k, v := range up.Headers {
			req.Header.Set(k, v)
		}
		for _, h := range drop {
			req.Header.Del(h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if up.Headers["X-Amz-Checksum-Sha256"] == "" {
		t.Fatalf("the upload does not sign the checksum: %v", up.Headers)
	}
	if s := put(bytes.Repeat([]byte("y"), 1000)); s != http.StatusBadRequest {
		t.Fatalf("presigned put of other bytes: %d, want 400 (BadDigest)", s)
	}
	if s := put(bytes.Repeat([]byte("y"), 1000), "X-Amz-Checksum-Sha256"); s != http.StatusForbidden {
		t.Fatalf("presigned put without the checksum header: %d, want 403", s)
	}
	if s := put(data); s != 200 {
		t.Fatalf("presigned put: %d", s)
	}
	if s := put(bytes.Repeat([]byte("y"), 1000)); s != http.StatusPreconditionFailed {
		t.Fatalf("second presigned put: %d, want 412", s)
	}
	get, err := st.PresignGet(ctx, key)
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
	// A person's download is an attachment, never shown inline.
	dl, err := st.PresignDownload(ctx, key, `dist "x"/ü.tar.zst`)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err = http.Get(dl); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition"))
	if resp.StatusCode != 200 || !bytes.Equal(body, data) || err != nil || params["filename"] != `dist "x"/ü.tar.zst` ||
		!strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment;") ||
		resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("download: %d %q %q %v", resp.StatusCode, resp.Header.Get("Content-Disposition"), resp.Header.Get("Content-Type"), err)
	}
}
