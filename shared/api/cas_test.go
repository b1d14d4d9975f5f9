package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// uploadTo PUTs data as a runner would, to the URL an upload answer gave.
func uploadTo(t *testing.T, answer []byte, data []byte) {
	t.Helper()
	if status := putTo(t, answer, data); status != 200 {
		t.Fatalf("presigned upload: %d", status)
	}
}

// putTo PUTs data to the URL an upload answer gave and returns S3's status.
func putTo(t *testing.T, answer []byte, data []byte) int {
	t.Helper()
	var up struct {
		Exists  bool              `json:"exists"`
		URL     string            `json:"upload_url"`
		Method  string            `json:"upload_method"`
		Headers map[string]string `json:"upload_headers"`
	}
	if err := json.Unmarshal(answer, &up); err != nil || up.Exists || up.URL == "" {
		t.Fatalf("upload answer %s", answer)
	}
	req, _ := http.NewRequest(up.Method, up.URL, bytes.NewReader(data))
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestArtifactFlow: upload through the presigned URL, commit (checked in
// S3 by the checksum S3 verified), fetch from a dependant; a forged upload
// is refused by S3 itself and cannot be committed; a job not in needs
// cannot fetch.
func TestArtifactFlow(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("a")
	_, err := e.store.CreateRun(context.Background(), store.NewRun{Project: "acme/app", Jobs: []store.NewJob{
		{Name: "build"}, {Name: "test", Needs: []string{"build"}}, {Name: "other"}}})
	if err != nil {
		t.Fatal(err)
	}
	build := e.claim(a)
	data := []byte("compiled program")
	digest, size := digestOf(data), int64(len(data))
	s, body := e.post(jobPath(build, "artifacts"), a.Token, leaseBody(build.Lease, map[string]any{"name": "bin", "digest": digest, "size": size}))
	if s != 200 {
		t.Fatalf("artifacts: %d %s", s, body)
	}
	// Commit before upload: refused, nothing registered.
	if s, body := e.post(jobPath(build, "artifacts/commit"), a.Token, leaseBody(build.Lease, map[string]any{"name": "bin", "digest": digest, "size": size})); s != 400 {
		t.Fatalf("commit before upload: %d %s", s, body)
	}
	uploadTo(t, body, data)
	if s, body := e.post(jobPath(build, "artifacts/commit"), a.Token, leaseBody(build.Lease, map[string]any{"name": "bin", "digest": digest, "size": size})); s != 201 {
		t.Fatalf("commit: %d %s", s, body)
	}
	// Same blob again: the CAS says it exists.
	if s, body := e.post(jobPath(build, "artifacts"), a.Token, leaseBody(build.Lease, map[string]any{"name": "bin2", "digest": digest, "size": size})); s != 200 || !bytes.Contains(body, []byte(`"exists":true`)) {
		t.Fatalf("second upload request: %d %s", s, body)
	}
	// A forged upload: bytes that do not match the claimed digest.
	forged := digestOf([]byte("what it claims to be"))
	_, body = e.post(jobPath(build, "artifacts"), a.Token, leaseBody(build.Lease, map[string]any{"name": "evil", "digest": forged, "size": 9}))
	if status := putTo(t, body, []byte("not that!")); status != 400 {
		t.Fatalf("S3 took bytes that do not match the signed checksum: %d", status)
	}
	if s, body := e.post(jobPath(build, "artifacts/commit"), a.Token, leaseBody(build.Lease, map[string]any{"name": "evil", "digest": forged, "size": 9})); s != 400 {
		t.Fatalf("forged commit: %d %s", s, body)
	}
	if _, _, err := e.cas.Open(context.Background(), cas.BlobKey(e.project.ID, true, forged)); err == nil {
		t.Fatal("forged blob in the CAS")
	}
	if s, _ := e.post(jobPath(build, "complete"), a.Token, leaseBody(build.Lease, map[string]any{"outcome": "passed"})); s != 200 {
		t.Fatal("complete build")
	}
	other := e.claim(a)
	test := e.claim(a)
	if other.Job.Name != "other" {
		other, test = test, other
	}
	s, body = e.post(jobPath(test, "artifacts/fetch"), a.Token, leaseBody(test.Lease, map[string]any{"job": "build", "name": "bin"}))
	if s != 200 {
		t.Fatalf("fetch: %d %s", s, body)
	}
	if got := castest.Download(t, str(body, "url")); !bytes.Equal(got, data) {
		t.Fatalf("fetched %q", got)
	}
	if s, body := e.post(jobPath(other, "artifacts/fetch"), a.Token, leaseBody(other.Lease, map[string]any{"job": "build", "name": "bin"})); s != 403 {
		t.Fatalf("fetch from a job not needed: %d %s", s, body)
	}
	if s, _ := e.post(jobPath(test, "artifacts/fetch"), a.Token, leaseBody(test.Lease, map[string]any{"job": "build", "name": "nope"})); s != 404 {
		t.Fatalf("fetch of unknown artifact: %d", s)
	}
}

// TestCacheFlow: a cache saved by a failing job is never visible; one
// saved by a passing job is restored by exact key and by prefix.
func TestCacheFlow(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("a")
	save := func(c protocol.Claim, key string, data []byte) {
		t.Helper()
		d, n := digestOf(data), int64(len(data))
		s, body := e.post(jobPath(c, "cache/save"), a.Token, leaseBody(c.Lease, map[string]any{"key": key, "digest": d, "size": n}))
		if s != 200 {
			t.Fatalf("save: %d %s", s, body)
		}
		if !bytes.Contains(body, []byte(`"exists":true`)) {
			uploadTo(t, body, data)
		}
		if s, body := e.post(jobPath(c, "cache/commit"), a.Token, leaseBody(c.Lease, map[string]any{"key": key, "digest": d, "size": n})); s != 201 {
			t.Fatalf("cache commit: %d %s", s, body)
		}
	}
	restore := func(c protocol.Claim, keys ...string) (int, []byte) {
		return e.post(jobPath(c, "cache/restore"), a.Token, leaseBody(c.Lease, map[string]any{"keys": keys}))
	}
	e.createRun("fails")
	c := e.claim(a)
	save(c, "deps-v1-abc", []byte("from a failing job"))
	if s, _ := e.post(jobPath(c, "complete"), a.Token, leaseBody(c.Lease, map[string]any{"outcome": "failed", "exit_code": 1})); s != 200 {
		t.Fatal("complete")
	}
	e.createRun("passes")
	c = e.claim(a)
	if s, body := restore(c, "deps-v1-abc", "deps-"); s != 204 {
		t.Fatalf("a failing job's cache is visible: %d %s", s, body)
	}
	save(c, "deps-v1-def", []byte("from a passing job"))
	if s, _ := e.post(jobPath(c, "complete"), a.Token, leaseBody(c.Lease, map[string]any{"outcome": "passed"})); s != 200 {
		t.Fatal("complete")
	}
	e.createRun("reader")
	c = e.claim(a)
	s, body := restore(c, "deps-v1-zzz", "deps-v1-")
	if s != 200 || str(body, "key") != "deps-v1-def" {
		t.Fatalf("prefix restore: %d %s", s, body)
	}
	if got := castest.Download(t, str(body, "url")); string(got) != "from a passing job" {
		t.Fatalf("restored %q", got)
	}
	if s, body := restore(c, "deps-v1-def"); s != 200 || str(body, "key") != "deps-v1-def" {
		t.Fatalf("exact restore: %d %s", s, body)
	}
	// An existing key is immutable: saving it again is answered "exists".
	s, body = e.post(jobPath(c, "cache/save"), a.Token, leaseBody(c.Lease, map[string]any{"key": "deps-v1-def", "digest": digestOf([]byte("x")), "size": 1}))
	if s != 200 || !bytes.Contains(body, []byte(`"key_exists":true`)) {
		t.Fatalf("save of an existing key: %d %s", s, body)
	}
}
