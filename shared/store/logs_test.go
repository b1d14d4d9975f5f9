package store_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
	"github.com/forgeci/forgeci/shared/store"
)

// secret is the value of DEPLOY_TOKEN in these tests.
const secret = "Zq8-hunter2-Xw7"

// TestLogsShownMasked: a runner that does not mask appends a secret in
// clear, split across two appends, and puts it in its reason. While the
// job runs, the part that may begin the secret is held back; then the
// secret shows as ***, however the log is read in windows (the offsets
// stay those of the stored bytes, which are unchanged), and the reason is
// stored masked. With KMS down, see testKMSDown and testReasonWithheld.
// secretJob is a claimed job of project p that was given the secret
// DEPLOY_TOKEN, and what made it.
type secretJob struct {
	root    store.User
	project store.Project
	spec    domain.JobSpec
	runner  store.Runner
	claim   *store.Claim
}

// claimSecretJob makes project p with the secret DEPLOY_TOKEN, a run of a
// job given it, and claims the job.
func claimSecretJob(t *testing.T, s *store.Store) secretJob {
	t.Helper()
	ctx := context.Background()
	d := secretJob{project: pgtest.Project(t, s, "p"), root: pgtest.Admin(t, s, "root"), runner: newRunner(t, s),
		spec: domain.JobSpec{Secrets: []string{"DEPLOY_TOKEN"}, Steps: []domain.Step{{Run: "deploy"}}}}
	if err := s.SetSecret(ctx, d.root, d.project.ID, "DEPLOY_TOKEN", secret); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "deploy", Spec: d.spec}}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, d.runner, nil, 0)
	if err != nil || c == nil || c.Secrets["DEPLOY_TOKEN"] != secret {
		t.Fatalf("claim: %+v %v", c, err)
	}
	d.claim = c
	return d
}

func TestLogsShownMasked(t *testing.T) {
	ctx := context.Background()
	s, kms, keys := kmsStore(t)
	d := claimSecretJob(t, s)
	root, p, spec, r, l := d.root, d.project, d.spec, d.runner, d.claim.Lease
	first, second := "log: token="+secret[:7], secret[7:]+" done\n"
	if _, err := s.AppendLog(ctx, r.ID, l.JobID, l, 0, []byte(first)); err != nil {
		t.Fatal(err)
	}
	w, err := s.ReadLogAs(ctx, root, l.RunID, l.JobID, 0, 0, 1<<20)
	if err != nil || string(w.Data) != "log: token=" || w.NextOffset != int64(len("log: token=")) {
		t.Fatalf("while running, half the secret appended: %q next %d (%v)", w.Data, w.NextOffset, err)
	}
	if _, err := s.AppendLog(ctx, r.ID, l.JobID, l, int64(len(first)), []byte(second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteWithReason(ctx, r.ID, l.JobID, l, domain.OutcomeFailed, 1, "deploy said "+secret); err != nil {
		t.Fatal(err)
	}
	raw := first + second
	if stored, _, err := s.ReadLog(ctx, l.RunID, l.JobID, 0, 0, 1<<20); err != nil || string(stored) != raw {
		t.Fatalf("stored bytes changed: %q %v", stored, err)
	}
	want := "log: token=*** done\n"
	if got := readInWindows(t, s, root, l, int64(len(raw)), 1<<20); got != want {
		t.Fatalf("shown %q, want %q", got, want)
	}
	// Windows of every size from every offset: never a piece of the secret.
	for limit := int64(1); limit <= int64(len(raw)); limit++ {
		if got := readInWindows(t, s, root, l, int64(len(raw)), limit); got != want {
			t.Fatalf("read %d bytes at a time: %q", limit, got)
		}
		for off := int64(0); off < int64(len(raw)); off++ {
			w, err := s.ReadLogAs(ctx, root, l.RunID, l.JobID, 0, off, limit)
			if err != nil || leaks(string(w.Data), secret) {
				t.Fatalf("window [%d, +%d): %q %v", off, limit, w.Data, err)
			}
		}
	}
	var reason string
	_ = s.Pool().QueryRow(ctx, `SELECT reason FROM jobs WHERE id = $1`, l.JobID).Scan(&reason)
	if reason != "deploy said ***" {
		t.Fatalf("stored reason %q", reason)
	}

	testKMSDown(t, s, kms, keys, r, root, p, spec, l)
}

// testKMSDown: a job of an untrusted run names the secret but was given
// nothing, so its log and reason are shown as stored, even with KMS down;
// a cold container with KMS down refuses to show the trusted job's log.
func testKMSDown(t *testing.T, s *store.Store, kms *fakekms.KMS, keys secretbox.Keyring, r store.Runner,
	root store.User, p store.Project, spec domain.JobSpec, l domain.Lease) {
	ctx := context.Background()
	fork, err := s.CreateRun(ctx, store.NewRun{Project: "p", Untrusted: true, Actor: "github:1",
		Jobs: []store.NewJob{{Name: "fork", Spec: spec}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approve(ctx, root, fork.ID); err != nil {
		t.Fatal(err)
	}
	u, err := s.Claim(ctx, r, nil, 0)
	if err != nil || u == nil || len(u.Secrets) != 0 {
		t.Fatalf("untrusted claim: %+v %v", u, err)
	}
	if _, err := s.AppendLog(ctx, r.ID, u.Lease.JobID, u.Lease, 0, []byte("guess "+secret+"\n")); err != nil {
		t.Fatal(err)
	}

	// A cold container with KMS down.
	kms.SetDown(true)
	cold := store.New(s.Pool(), store.Limits{})
	cold.SetKeyring(keys)
	if w, err := cold.ReadLogAs(ctx, root, l.RunID, l.JobID, 0, 0, 1<<20); domain.ErrorCode(err) != domain.EUnavailable || w.Data != nil {
		t.Fatalf("trusted job's log with KMS down: %q %v", w.Data, err)
	}
	if w, err := cold.ReadLogAs(ctx, root, u.Lease.RunID, u.Lease.JobID, 0, 0, 1<<20); err != nil || string(w.Data) != "guess "+secret+"\n" {
		t.Fatalf("untrusted job's log with KMS down: %q %v", w.Data, err)
	}
	if _, err := cold.CompleteWithReason(ctx, r.ID, u.Lease.JobID, u.Lease, domain.OutcomeFailed, 1, "why "+secret); err != nil {
		t.Fatal(err)
	}
	var reason string
	_ = s.Pool().QueryRow(ctx, `SELECT reason FROM jobs WHERE id = $1`, u.Lease.JobID).Scan(&reason)
	if reason != "why "+secret {
		t.Fatalf("an untrusted job's reason: %q (it was given no secret: nothing to mask)", reason)
	}
	testReasonWithheld(t, cold, r, root, p, spec)
}

// testReasonWithheld: a trusted job's reason that cannot be masked (KMS
// down, cold container) is withheld, not stored in clear.
func testReasonWithheld(t *testing.T, cold *store.Store, r store.Runner, root store.User, p store.Project, spec domain.JobSpec) {
	ctx := context.Background()
	if _, err := cold.CreateRun(ctx, store.NewRun{Project: p.Name, Jobs: []store.NewJob{{Name: "plain"}, {Name: "later", Spec: spec, Needs: []string{"plain"}}}}); err != nil {
		t.Fatal(err)
	}
	c, err := cold.Claim(ctx, r, nil, 0) // "plain" names no secret: no KMS needed
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	// Pretend the job had been given the secret (a job that names one
	// would not be claimed with KMS down).
	if _, err := cold.Pool().Exec(ctx, `UPDATE jobs SET secret_names = '{DEPLOY_TOKEN}' WHERE id = $1`, c.Lease.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := cold.CompleteWithReason(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomeFailed, 1, "why "+secret); err != nil {
		t.Fatal(err)
	}
	var reason string
	_ = cold.Pool().QueryRow(ctx, `SELECT reason FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&reason)
	if !strings.HasPrefix(reason, "reason withheld") {
		t.Fatalf("reason with KMS down: %q", reason)
	}
}

// readInWindows reads the whole log limit stored bytes at a time, as a
// follower does, and returns the text shown.
func readInWindows(t *testing.T, s *store.Store, u store.User, l domain.Lease, size, limit int64) string {
	t.Helper()
	var out bytes.Buffer
	for off := int64(0); off < size; {
		w, err := s.ReadLogAs(context.Background(), u, l.RunID, l.JobID, 0, off, limit)
		if err != nil || w.NextOffset <= off || w.NextOffset > off+limit {
			t.Fatalf("read at %d: next %d %v", off, w.NextOffset, err)
		}
		out.Write(w.Data)
		off = w.NextOffset
	}
	return out.String()
}

// leaks says whether text shows any 4 bytes of the secret.
func leaks(text, secret string) bool {
	for i := 0; i+mask.MinLen <= len(secret); i++ {
		if strings.Contains(text, secret[i:i+mask.MinLen]) {
			return true
		}
	}
	return false
}
