package scm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

// TestSignatureVector: GitHub's own test vector (docs "Validating webhook
// deliveries") verifies; a tampered body, a tampered signature, a missing
// one, a SHA-1-only one and an unknown target are 401 and store nothing.
func TestSignatureVector(t *testing.T) {
	e := setup(t)
	vector := []byte("Hello, World!")
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := sign(repoSecret, vector); got != want {
		t.Fatalf("test vector signs to %s, want %s", got, want)
	}
	if code, _ := e.deliver("ping", "g-ping", vector, want); code != http.StatusAccepted {
		t.Fatalf("vector: status %d, want 202", code)
	}

	body := pushPayload("0123456789abcdef0123456789abcdef01234567")
	good := sign(repoSecret, body)
	tampered := append(bytes.Clone(body[:len(body)-1]), ' ', '}')
	badSig := []byte(good)
	badSig[len(badSig)-1] ^= 1
	for name, tc := range map[string]struct {
		body []byte
		sig  string
	}{
		"tampered body":      {tampered, good},
		"tampered signature": {body, string(badSig)},
		"missing signature":  {body, ""},
		"wrong secret":       {body, sign("another secret entirely", body)},
	} {
		if code, out := e.deliver("push", "g-"+name, tc.body, tc.sig); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d %v, want 401", name, code, out)
		}
	}
	// SHA-1 alone is not accepted.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "g-sha1")
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", fmt.Sprint(repoID))
	req.Header.Set("X-Hub-Signature", "sha1=0000000000000000000000000000000000000000")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("SHA-1 only: %v %v, want 401", resp.StatusCode, err)
	}
	// A target nobody registered has no secret to check against.
	req.Header.Set("X-Hub-Signature-256", good)
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", "999")
	req.Body = http.NoBody
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown target: %v %v, want 401", resp.StatusCode, err)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries`); n != 0 {
		t.Fatalf("%d deliveries stored from bad requests", n)
	}
	// The same push correctly signed is recorded once.
	if code, out := e.deliver("push", "g-good", body, good); code != http.StatusAccepted || out["duplicate"] != false {
		t.Fatalf("good push: %d %v", code, out)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries`); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}

// TestIntakeEdges: unknown events are acknowledged and not stored; a body
// over the limit is 413; a signed payload without a repository is 400.
func TestIntakeEdges(t *testing.T) {
	e := setup(t)
	issues := []byte(`{"action":"opened","repository":{"id":1296269}}`)
	if code, out := e.deliver("issues", "g-1", issues, sign(repoSecret, issues)); code != http.StatusAccepted || out["ignored"] == nil {
		t.Fatalf("issues event: %d %v", code, out)
	}
	big := bytes.Repeat([]byte(" "), 11<<20)
	if code, _ := e.deliver("push", "g-2", big, sign(repoSecret, big)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("11 MiB body: %d, want 413", code)
	}
	norepo := []byte(`{"ref":"refs/heads/main"}`)
	if code, _ := e.deliver("push", "g-3", norepo, sign(repoSecret, norepo)); code != http.StatusBadRequest {
		t.Fatalf("payload without repository: %d, want 400", code)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries`); n != 0 {
		t.Fatalf("%d deliveries stored", n)
	}
}

// TestPushCreatesRun: a push becomes a run of the commit whose source
// digests are exactly what the CLI computes for the same checkout, and each
// job gets one check run that ends with the job's conclusion.
func TestPushCreatesRun(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	if code, out := e.deliver("push", "guid-push-1", body, sign(repoSecret, body)); code != http.StatusAccepted {
		t.Fatalf("deliver: %d %v", code, out)
	}
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("pass: %+v, want one run", res)
	}
	run := e.onlyRun()
	tree, err := snapshot.GitTree(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := snapshot.Write(discard{}, tree)
	if err != nil {
		t.Fatal(err)
	}
	if run.SourceDigest != cli.BlobDigest || run.ManifestDigest != cli.ManifestDigest {
		t.Fatalf("run source %s / %s, CLI computes %s / %s", run.SourceDigest, run.ManifestDigest, cli.BlobDigest, cli.ManifestDigest)
	}
	if run.GitSHA != sha || run.GitRef != "refs/heads/main" || run.Trigger != "github:push refs/heads/main" || run.Project != "hello" {
		t.Fatalf("run facts: %+v", run)
	}
	if _, _, err := e.cas.Stat(context.Background(), cas.BlobKey(e.project.ID, true, run.SourceDigest)); err != nil {
		t.Fatalf("source blob is not in the CAS: %v", err)
	}

	e.reconcile()
	checks := e.gh.CheckRuns(repoName)
	if len(checks) != 2 {
		t.Fatalf("%d check runs, want 2: %+v", len(checks), checks)
	}
	jobs, err := e.store.RunJobs(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	jobIDs := map[string]string{}
	for _, j := range jobs {
		jobIDs[j.Name] = j.ID
	}
	for _, c := range checks {
		if c.Status != "queued" || c.ExternalID != jobIDs[c.Name] || c.HeadSHA != sha {
			t.Fatalf("check run before the jobs ran: %+v", c)
		}
	}
	e.finishJobs("test")
	e.reconcile()
	got := map[string]string{}
	for _, c := range e.gh.CheckRuns(repoName) {
		got[c.Name] = c.Status + "/" + c.Conclusion
		if c.DetailsURL != "https://ci.example.com/runs/"+run.ID+"/jobs/"+c.ExternalID {
			t.Errorf("details URL %q", c.DetailsURL)
		}
	}
	if got["build"] != "completed/success" || got["test"] != "completed/failure" || len(got) != 2 {
		t.Fatalf("final check runs: %v", got)
	}
	if n := e.gh.CountCalls("POST", "/repos/octo/hello/check-runs"); n != 2 {
		t.Fatalf("%d creates, want 2", n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestConcurrentRedeliveries: 100 concurrent copies of one delivery, with
// four workers racing, make exactly one delivery row and one run.
func TestConcurrentRedeliveries(t *testing.T) {
	e := setup(t)
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	sig := sign(repoSecret, body)
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out := e.deliver("push", "guid-same", body, sig)
			if code != http.StatusAccepted {
				t.Errorf("copy: %d %v", code, out)
			}
			if out["duplicate"] == false {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := e.newWorker()
			for j := 0; j < 20; j++ {
				if _, err := w.RunOnce(context.Background()); err != nil {
					t.Error(err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	e.runOnce()
	if firsts != 1 {
		t.Fatalf("%d copies were taken as new, want 1", firsts)
	}
	if n := e.count(`SELECT count(*) FROM scm_deliveries`); n != 1 {
		t.Fatalf("%d delivery rows", n)
	}
	run := e.onlyRun()
	if n := e.count(`SELECT count(*) FROM scm_deliveries WHERE state = 'DONE' AND run_id = $1`, run.ID); n != 1 {
		t.Fatal("the delivery is not DONE with its run")
	}
}

// TestStaleWorkerIsFenced: a worker that claimed a delivery and then
// stalled past its lease cannot commit a second run after another worker
// reclaimed and finished it.
func TestStaleWorkerIsFenced(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	dir, sha := gitRepo(t, pipelineYAML)
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-stale", body, sign(repoSecret, body))
	stale, err := e.store.ClaimDelivery(ctx, time.Second)
	if err != nil || stale == nil {
		t.Fatalf("claim: %v %v", stale, err)
	}
	if res := e.runOnce(); res.Runs != 0 {
		t.Fatalf("a leased delivery was processed: %+v", res)
	}
	e.expireDeliveryLease("guid-stale")
	if res := e.runOnce(); res.Runs != 1 {
		t.Fatalf("expired delivery lease was not reclaimed: %+v", res)
	}
	_, err = e.store.CompleteDeliveryWithRun(ctx, stale, store.NewRun{Project: "hello", Jobs: []store.NewJob{{Name: "x"}}})
	if !errors.Is(err, store.ErrDeliveryLeaseLost) {
		t.Fatalf("stale worker's commit: %v, want lease lost", err)
	}
	e.onlyRun()
	if n := e.count(`SELECT attempts FROM scm_deliveries`); n != 2 {
		t.Fatalf("attempts %d, want 2", n)
	}
}

// TestPermanentFailureVisible: a commit without a pipeline file fails its
// delivery at once (no retries), with the reason visible to admins; a
// transient failure is retried and then gives up after MaxAttempts.
func TestPermanentFailureVisible(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	dir, sha := gitRepo(t, "")
	e.gh.AddGitCommit(t, repoName, dir, sha)
	body := pushPayload(sha)
	e.deliver("push", "guid-nopipeline", body, sign(repoSecret, body))
	if res := e.runOnce(); res.Failed != 1 || res.Runs != 0 {
		t.Fatalf("pass: %+v", res)
	}
	failed, _, err := e.store.Deliveries(ctx, e.admin, store.DeliveryFailed, store.Page{Limit: 10})
	if err != nil || len(failed) != 1 || failed[0].Attempts != 1 || !bytes.Contains([]byte(failed[0].LastError), []byte(".forgeci.yml")) {
		t.Fatalf("failed deliveries: %+v %v", failed, err)
	}
	// The author sees why on the commit: one failing "forgeci" check run.
	e.reconcile()
	notices := e.gh.CheckRuns(repoName)
	if len(notices) != 1 || notices[0].Name != "forgeci" || notices[0].Conclusion != "failure" || notices[0].HeadSHA != sha ||
		!strings.Contains(notices[0].Output.Summary, ".forgeci.yml") || notices[0].ExternalID != "delivery:guid-nopipeline" {
		t.Fatalf("notice check runs: %+v", notices)
	}
	// The contents API said there is no pipeline: the tree was not
	// downloaded. Another event at the commit fails the same way, with no
	// second notice.
	body = bytes.Replace(body, []byte(`"pusher":{"name":"octo"}`), []byte(`"pusher":{"name":"octo2"}`), 1)
	e.deliver("push", "guid-nopipeline-again", body, sign(repoSecret, body))
	if res := e.runOnce(); res.Failed != 1 {
		t.Fatalf("the second event: %+v", res)
	}
	e.reconcile()
	if n, dl := len(e.gh.CheckRuns(repoName)), e.gh.CountCalls("GET", "/repos/"+repoName+"/tarball"); n != 1 || dl != 0 {
		t.Fatalf("%d notices, %d tarball downloads; want 1 and none", n, dl)
	}

	// A commit GitHub keeps failing to serve (503): retried, then FAILED.
	e.worker.MaxAttempts = 3
	body = pushPayload("1111111111111111111111111111111111111111")
	e.deliver("push", "guid-down", body, sign(repoSecret, body))
	e.gh.SetDown(true)
	deadline := time.Now().Add(10 * time.Second)
	for e.count(`SELECT count(*) FROM scm_deliveries WHERE guid = 'guid-down' AND state = 'FAILED'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the failing delivery never gave up")
		}
		e.runOnce()
		time.Sleep(30 * time.Millisecond)
	}
	if n := e.count(`SELECT attempts FROM scm_deliveries WHERE guid = 'guid-down'`); n != 3 {
		t.Fatalf("gave up after %d attempts, want 3", n)
	}
	// An admin retries it once GitHub is back; the commit is still missing,
	// which is permanent.
	e.gh.SetDown(false)
	if err := e.store.RetryDelivery(ctx, e.admin, "guid-down"); err != nil {
		t.Fatal(err)
	}
	if res := e.runOnce(); res.Failed != 1 {
		t.Fatalf("retried delivery: %+v", res)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}
