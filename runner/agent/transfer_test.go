package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// TestTransfersRetry: a presigned download or upload whose connection is
// dropped is tried again instead of failing the job (the chaos suite found
// jobs failed by one dropped S3 connection); a blob that does not match
// its digest is not.
func TestTransfersRetry(t *testing.T) {
	blob := []byte("the blob's bytes")
	sum := sha256.Sum256(blob)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	var gets, puts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int64
		if r.Method == http.MethodPut {
			n = puts.Add(1)
			_, _ = io.ReadAll(r.Body)
		} else {
			n = gets.Add(1)
		}
		if n <= 2 { // the first two of each are cut off
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusPreconditionFailed) // it got there the first time
			return
		}
		_, _ = w.Write(blob)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := &job{a: New(Config{Client: client.New(srv.URL, "")}), ctx: ctx}
	dir := t.TempDir()
	name, err := j.download(srv.URL+"/blob", digest, int64(len(blob)), dir)
	if err != nil {
		t.Fatalf("download through two dropped connections: %v", err)
	}
	if b, _ := os.ReadFile(name); string(b) != string(blob) {
		t.Fatalf("downloaded %q", b)
	}
	file := dir + "/up"
	_ = os.WriteFile(file, blob, 0o644)
	if err := j.upload(protocol.UploadResponse{URL: srv.URL + "/blob", Method: http.MethodPut}, file, int64(len(blob))); err != nil {
		t.Fatalf("upload through two dropped connections: %v", err)
	}
	before := gets.Load()
	if _, err := j.download(srv.URL+"/blob", "sha256:"+hex.EncodeToString(make([]byte, 32)), int64(len(blob)), dir); err == nil {
		t.Fatal("a blob that does not match its digest was accepted")
	}
	if n := gets.Load() - before; n != 1 {
		t.Fatalf("a digest mismatch was tried %d times", n)
	}
}

// TestRemoveWorkspaceKeepsTheNextAttempt: ending one attempt removes only
// its own workspace; the chaos suite caught a retry of the same job, on
// another slot of the same runner, losing its files to the attempt before.
func TestRemoveWorkspaceKeepsTheNextAttempt(t *testing.T) {
	iso, err := isolate.New(isolate.Config{Mode: isolate.None}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer iso.Close()
	a := New(Config{WorkDir: t.TempDir(), Isolation: iso})
	first := domain.Lease{RunID: "run", JobID: "job", LeaseID: "lease-1", Generation: 1}
	second := first
	second.LeaseID, second.Generation = "lease-2", 2
	boxes := map[string]*isolate.Box{}
	for _, l := range []domain.Lease{first, second} {
		if boxes[l.LeaseID], err = iso.NewBox(0, filepath.Join(a.cfg.WorkDir, l.RunID, l.JobID, l.LeaseID), isolate.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	clean := func(l domain.Lease) {
		_ = (&job{a: a, claim: &protocol.Claim{Lease: l}, box: boxes[l.LeaseID]}).cleanUp(a.cfg.Log)
	}
	clean(first)
	if _, err := os.Stat(filepath.Join(a.cfg.WorkDir, "run", "job", "lease-2")); err != nil {
		t.Fatalf("the next attempt's workspace went with the first: %v", err)
	}
	clean(second)
	if _, err := os.Stat(filepath.Join(a.cfg.WorkDir, "run")); !os.IsNotExist(err) {
		t.Fatalf("the run's directory is left behind: %v", err)
	}
}
