package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
	"github.com/forgeci/forgeci/shared/store"
)

// kmsStore is a store whose project secrets are sealed through a fake KMS
// (which the test may take down), with that keyring.
func kmsStore(t *testing.T) (*store.Store, *fakekms.KMS, secretbox.Keyring) {
	t.Helper()
	kms, keyID := fakekms.New(t)
	kms.SetEnv(t)
	keys, err := secretbox.NewKMSKeyring(context.Background(), keyID)
	if err != nil {
		t.Fatal(err)
	}
	s := pgtest.NewStore(t, store.Limits{})
	s.SetKeyring(keys)
	return s, kms, keys
}

// secretSpec is a job that names DEPLOY_TOKEN both ways, and a secret
// that does not exist.
func secretSpec() domain.JobSpec {
	return domain.JobSpec{Secrets: []string{"DEPLOY_TOKEN"},
		Env:   map[string]string{"T": "x${{ secrets.DEPLOY_TOKEN }}x", "N": "${{ secrets.NOT_SET }}"},
		Steps: []domain.Step{{Run: "deploy --key ${{ secrets.API_KEY }}"}}}
}

// TestSecretsThroughKMS: secrets are sealed at rest under a project data key
// that KMS wraps; a claim carries exactly the secrets its job names (a
// trusted run's), with KMS asked once per warm container; a job that names
// none gets none, and the other project's secrets never appear. When KMS
// cannot open the data key, the claim fails and its job goes back to the
// queue (the lease never left the server), and the next claim, with KMS
// back, gets it as a new generation.
func TestSecretsThroughKMS(t *testing.T) {
	ctx := context.Background()
	s, kms, keys := kmsStore(t)
	p := pgtest.Project(t, s, "p")
	q := pgtest.Project(t, s, "q")
	root := pgtest.Admin(t, s, "root")
	for _, sec := range []struct{ project, name, value string }{{p.ID, "DEPLOY_TOKEN", "deploy-value"},
		{p.ID, "API_KEY", "api-key-value"}, {p.ID, "UNUSED", "unused-value"}, {q.ID, "DEPLOY_TOKEN", "q's own value"}} {
		if err := s.SetSecret(ctx, root, sec.project, sec.name, sec.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetSecret(ctx, root, p.ID, "SHORT", "abc"); domain.ErrorCode(err) != domain.EInvalid {
		t.Fatalf("a 3-byte secret: %v", err)
	}
	var plain int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM project_secrets
		WHERE value IS NOT NULL OR position('value'::bytea in sealed) > 0`).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("%d secrets readable at rest (%v)", plain, err)
	}

	// Claims come from another container: its first opens the data key.
	s = store.New(s.Pool(), store.Limits{})
	s.SetKeyring(keys)
	r := newRunner(t, s)
	if _, err := s.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{
		{Name: "deploy", Spec: secretSpec()}, {Name: "plain", Needs: []string{"deploy"}}}}); err != nil {
		t.Fatal(err)
	}
	decrypts := kms.Calls(fakekms.OpDecrypt)
	c, err := s.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	var job domain.ClaimedJob
	_ = json.Unmarshal(c.Job, &job)
	if len(c.Secrets) != 1 || c.Secrets["DEPLOY_TOKEN"] != "deploy-value" || job.Env["T"] != "xdeploy-valuex" ||
		job.Env["N"] != "" || job.Steps[0].Run != "deploy --key api-key-value" {
		t.Fatalf("claim: secrets %v, env %v, run %q", c.Secrets, job.Env, job.Steps[0].Run)
	}
	if strings.Join(c.Mask, ",") != "api-key-value,deploy-value" {
		t.Fatalf("mask %v", c.Mask)
	}
	if bytes.Contains(c.Job, []byte("unused-value")) || bytes.Contains(c.Job, []byte("q's own")) {
		t.Fatal("the claim carries secrets its job does not name")
	}
	var stored []byte
	_ = s.Pool().QueryRow(ctx, `SELECT spec FROM jobs WHERE id = $1`, c.Lease.JobID).Scan(&stored)
	if bytes.Contains(stored, []byte("deploy-value")) {
		t.Fatal("a secret was stored in the job spec")
	}
	if _, err := s.Complete(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	if c, err = s.Claim(ctx, r, nil, 0); err != nil || c == nil || len(c.Secrets)+len(c.Mask) != 0 {
		t.Fatalf("a job that names no secret: %+v %v", c, err)
	}
	if n := kms.Calls(fakekms.OpDecrypt) - decrypts; n != 1 {
		t.Fatalf("KMS was asked %d times for two claims, want once (the data key is cached)", n)
	}

	// A cold container while KMS is down: the claim fails, the job is
	// queued again, and the attempt says why.
	cold := store.New(s.Pool(), store.Limits{})
	cold.SetKeyring(keys)
	if _, err := cold.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "later", Spec: secretSpec()}}}); err != nil {
		t.Fatal(err)
	}
	kms.SetDown(true)
	if c, err := cold.Claim(ctx, r, nil, 0); domain.ErrorCode(err) != domain.EUnavailable || c != nil {
		t.Fatalf("claim with KMS down: %+v %v", c, err)
	}
	var state, reason string
	if err := s.Pool().QueryRow(ctx, `SELECT j.state, a.reason FROM jobs j JOIN job_attempts a ON a.job_id = j.id
		WHERE j.name = 'later'`).Scan(&state, &reason); err != nil || state != "QUEUED" || !strings.HasPrefix(reason, "claim not delivered") {
		t.Fatalf("after the failed claim: %s %q %v", state, reason, err)
	}
	kms.SetDown(false)
	c, err = cold.Claim(ctx, r, nil, 0)
	if err != nil || c == nil || c.Lease.Generation != 2 || c.Secrets["DEPLOY_TOKEN"] != "deploy-value" {
		t.Fatalf("claim with KMS back: %+v %v", c, err)
	}
}
