package api_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// The attacks of "Ownership beyond the lease", each as it was tried on the
// release before projects and trust tiers. (The webhook one is
// TestWebhookBinding in package scm.)

// TestAttackWriterTakesAnotherProjectsSecrets: a writer of one project used
// to create a run in any project (creating it if new), posing as a push to
// main, and the claim handed out that project's secrets. Now: another
// project is not found, a new name creates nothing, the trigger and ref are
// the server's, and a writer without the secrets permission gets a run
// that waits for approval and, approved, carries no secret.
func TestAttackWriterTakesAnotherProjectsSecrets(t *testing.T) {
	f := newTenancy(t)
	ctx := context.Background()
	victim := pgtestProject(t, f.env, "victim/prod")
	global, _ := f.store.AuthenticateUser(ctx, f.global)
	if err := f.store.SetSecret(ctx, global, victim.ID, "AWS_SECRET", "the victim's key"); err != nil {
		t.Fatal(err)
	}
	before := f.state()
	for _, project := range []string{"victim/prod", "brand/new"} {
		body := map[string]any{"project": project, "source": f.source}
		if s, out := f.call("POST", "/v1/runs", f.writerA, body, false); s != 404 {
			t.Fatalf("a run in %s by acme/app's writer: %d %s", project, s, out)
		}
		if s, out := f.call("POST", "/v1/uploads", f.writerA, map[string]any{"project": project,
			"digest": f.source.BlobDigest, "size": f.source.Size}, false); s != 404 {
			t.Fatalf("an upload into %s by acme/app's writer: %d %s", project, s, out)
		}
	}
	for _, field := range []string{"trigger", "git_ref"} {
		body := map[string]any{"project": "acme/app", "source": f.source, field: "github:push refs/heads/main"}
		if s, out := f.call("POST", "/v1/runs", f.writerA, body, false); s != 400 || errCode([]byte(out)) != domain.EInvalid {
			t.Fatalf("a client-set %s: %d %s", field, s, out)
		}
	}
	if after := f.state(); after != before {
		t.Fatalf("refused runs changed something:\n%s", diff(before, after))
	}

	// The writer's own run in a project with the secret: untrusted, waiting.
	writer, _ := f.store.AuthenticateUser(ctx, f.writerA)
	if _, err := f.store.SetMember(ctx, global, victim.ID, writer.ID, store.RoleWrite, false); err != nil {
		t.Fatal(err)
	}
	dir := map[string]any{"project": "victim/prod", "source": f.source}
	// The source must be uploaded into the victim's untrusted tier first.
	s, out := f.call("POST", "/v1/uploads", f.writerA, map[string]any{"project": "victim/prod",
		"digest": f.source.BlobDigest, "size": f.source.Size}, false)
	if s != 200 || !bytes.Contains([]byte(out), []byte(`"exists":false`)) {
		t.Fatalf("upload into victim/prod: %d %s", s, out)
	}
	f.putSource(victim.ID, false)
	s, out = f.call("POST", "/v1/runs", f.writerA, dir, false)
	if s != 201 {
		t.Fatalf("the writer's run: %d %s", s, out)
	}
	runID := str([]byte(out), "id")
	run, _ := f.store.GetRun(ctx, runID)
	if run.Trusted || run.Trigger != "cli:walter" || run.GitRef != "" || run.Approval != store.ApprovalPending {
		t.Fatalf("the writer's run: %+v", run)
	}
	if _, err := f.store.Approve(ctx, global, runID); err != nil {
		t.Fatal(err)
	}
	c := f.claimJob(f.runner, runID)
	if len(c.Secrets) != 0 || len(c.Mask) != 0 {
		t.Fatalf("an untrusted run's claim carries secrets: %v", c.Secrets)
	}
}

// putSource puts the fixture's source snapshot into a project tier's
// namespace, as the presigned upload would.
func (f *tenancy) putSource(projectID string, trusted bool) {
	f.t.Helper()
	body, _, err := f.cas.Open(context.Background(), cas.BlobKey(f.project.ID, trusted, f.source.BlobDigest))
	if err != nil {
		f.t.Fatal(err)
	}
	data, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.cas.Put(context.Background(), cas.BlobKey(projectID, trusted, f.source.BlobDigest), f.source.BlobDigest,
		bytes.NewReader(data), f.source.Size); err != nil {
		f.t.Fatal(err)
	}
}

// claimJob claims until it gets a job of run runID.
func (f *tenancy) claimJob(r runnerCreds, runID string) protocol.Claim {
	f.t.Helper()
	for range 20 {
		c := f.claim(r)
		if c.Lease.RunID == runID {
			return c
		}
	}
	f.t.Fatalf("no job of run %s was claimed", runID)
	return protocol.Claim{}
}

// TestAttackForkPoisonsMainCache: caches were scoped by project only, so a
// fork's run saved go-mod-2f1c and go-mod-zzzz and a later push to main
// restored the fork's bytes by exact key and by the prefix go-mod-. Now a
// fork's run writes only its own pull request's scope: main restores
// nothing of it, the pull request's next run does, and the fork's run may
// still read main's caches.
func TestAttackForkPoisonsMainCache(t *testing.T) {
	e := setup(t)
	r := e.registerRunner("box")
	run := func(nr store.NewRun) protocol.Claim {
		t.Helper()
		nr.Project, nr.Jobs = "acme/app", []store.NewJob{{Name: "j"}}
		created, err := e.store.CreateRun(context.Background(), nr)
		if err != nil {
			t.Fatal(err)
		}
		c := e.claim(r)
		if c.Lease.RunID != created.ID {
			t.Fatalf("claimed a job of run %s, want %s", c.Lease.RunID, created.ID)
		}
		return c
	}
	// The fork's author was approved before: its runs start at once.
	fork := store.NewRun{Untrusted: true, Scope: "refs/pull/7/head", BaseRef: "refs/heads/main", Actor: "github:1"}
	e.exec(`INSERT INTO approved_actors (project_id, actor, approved_by) VALUES ($1, 'github:1', 'test')`, e.project.ID)
	push := store.NewRun{Scope: "refs/heads/main", Actor: "github:2"}

	c := run(fork)
	e.saveCache(r, c, "go-mod-2f1c", []byte("poison by exact key"))
	e.saveCache(r, c, "go-mod-zzzz", []byte("poison by prefix"))
	e.complete(r, c, "passed")

	c = run(push)
	if s, body := e.restore(r, c, "go-mod-2f1c", "go-mod-"); s != 204 {
		t.Fatalf("main restored a fork's cache: %d %s", s, body)
	}
	e.saveCache(r, c, "go-mod-main", []byte("main's own"))
	e.complete(r, c, "passed")

	c = run(fork)
	s, body := e.restore(r, c, "go-mod-2f1c")
	if s != 200 || str(body, "key") != "go-mod-2f1c" || str(body, "scope") != "refs/pull/7/head" {
		t.Fatalf("the pull request's next run: %d %s", s, body)
	}
	if s, body := e.restore(r, c, "go-mod-main"); s != 200 || str(body, "scope") != "refs/heads/main" {
		t.Fatalf("a fork reads its base branch's cache: %d %s", s, body)
	}
	e.complete(r, c, "passed")

	// A branch push reads main's caches (the default branch); main never
	// reads the branch's.
	c = run(store.NewRun{Scope: "refs/heads/feature"})
	if s, body := e.restore(r, c, "go-mod-main"); s != 200 {
		t.Fatalf("a branch does not read the default branch: %d %s", s, body)
	}
	e.saveCache(r, c, "go-mod-feature", []byte("the branch's"))
	e.complete(r, c, "passed")
	c = run(push)
	if s, body := e.restore(r, c, "go-mod-feature", "go-mod-f"); s != 204 {
		t.Fatalf("main restored a branch's cache: %d %s", s, body)
	}
}

func (e *env) saveCache(r runnerCreds, c protocol.Claim, key string, data []byte) {
	e.t.Helper()
	d, n := digestOf(data), int64(len(data))
	s, body := e.post(jobPath(c, "cache/save"), r.Token, leaseBody(c.Lease, map[string]any{"key": key, "digest": d, "size": n}))
	if s != 200 {
		e.t.Fatalf("save: %d %s", s, body)
	}
	if !bytes.Contains(body, []byte(`"exists":true`)) {
		uploadTo(e.t, body, data)
	}
	if s, body := e.post(jobPath(c, "cache/commit"), r.Token, leaseBody(c.Lease, map[string]any{"key": key, "digest": d, "size": n})); s != 201 {
		e.t.Fatalf("cache commit: %d %s", s, body)
	}
}

func (e *env) restore(r runnerCreds, c protocol.Claim, keys ...string) (int, []byte) {
	return e.post(jobPath(c, "cache/restore"), r.Token, leaseBody(c.Lease, map[string]any{"keys": keys}))
}

func (e *env) complete(r runnerCreds, c protocol.Claim, outcome string) {
	e.t.Helper()
	if s, body := e.post(jobPath(c, "complete"), r.Token, leaseBody(c.Lease, map[string]any{"outcome": outcome})); s != 200 {
		e.t.Fatalf("complete: %d %s", s, body)
	}
}

// TestAttackDigestIsNotAKey: knowing a digest used to be enough. The CAS
// answered "exists" for any registered digest and committed it without an
// upload, so another project's job committed a victim's blob as its own
// artifact and a dependant fetched the bytes; committing it with size+1
// made the server delete the victim's object. Now a digest another project
// (or another tier of the same project) holds gets an upload URL into the
// caller's own namespace, cannot be committed without uploading the bytes
// there, and nothing a caller sends deletes a blob.
func TestAttackDigestIsNotAKey(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	r := e.registerRunner("box")
	secret := []byte("the victim's source, or a build that baked a key in")
	d, n := digestOf(secret), int64(len(secret))
	victimKey := cas.BlobKey(e.project.ID, true, d)
	if err := e.cas.Put(ctx, victimKey, d, bytes.NewReader(secret), n); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RegisterBlob(ctx, store.BlobRef{ProjectID: e.project.ID, Trusted: true, Digest: d}, n); err != nil {
		t.Fatal(err)
	}
	pgtestProject(t, e, "attacker/repo")
	for _, tc := range []struct {
		name      string
		project   string
		untrusted bool
	}{{"another project", "attacker/repo", false}, {"an untrusted run of the same project", "acme/app", true}} {
		created, err := e.store.CreateRun(ctx, store.NewRun{Project: tc.project, Untrusted: tc.untrusted, Actor: "x",
			Jobs: []store.NewJob{{Name: "steal"}, {Name: "read", Needs: []string{"steal"},
				Spec: domain.JobSpec{NeedArtifacts: []domain.NeedArtifact{{Job: "steal", Name: "loot"}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if tc.untrusted {
			e.exec(`UPDATE runs SET approval = 'none' WHERE id = $1`, created.ID)
			e.exec(`UPDATE jobs SET state = 'QUEUED', queued_at = now(), reason = NULL WHERE run_id = $1 AND name = 'steal'`, created.ID)
		}
		c := e.claim(r)
		ask := map[string]any{"name": "loot", "digest": d, "size": n}
		s, body := e.post(jobPath(c, "artifacts"), r.Token, leaseBody(c.Lease, ask))
		if s != 200 || bytes.Contains(body, []byte(`"exists":true`)) {
			t.Fatalf("%s: the digest is known to it: %d %s", tc.name, s, body)
		}
		for _, size := range []int64{n, n + 1} {
			ask["size"] = size
			if s, body := e.post(jobPath(c, "artifacts/commit"), r.Token, leaseBody(c.Lease, ask)); s != 400 {
				t.Fatalf("%s: a commit of bytes it never uploaded (size %d): %d %s", tc.name, size, s, body)
			}
		}
		e.complete(r, c, "passed")
		reader := e.claim(r)
		if s, body := e.post(jobPath(reader, "artifacts/fetch"), r.Token, leaseBody(reader.Lease,
			map[string]any{"job": "steal", "name": "loot"})); s != 404 {
			t.Fatalf("%s: the dependant fetched the loot: %d %s", tc.name, s, body)
		}
		e.complete(r, reader, "passed")
	}
	body, size, err := e.cas.Open(ctx, victimKey)
	if err != nil || size != n {
		t.Fatalf("the victim's blob is gone: %v", err)
	}
	body.Close()
}

// TestAttacksFromReview: what a review of the first version found. A
// writer without the secrets permission retried a trusted run and got its
// secrets (or a deploy job alone, without its tests); a project admin
// without the secrets permission granted it to themselves; ?before= told a
// member of another project whether a run ID exists.
func TestAttacksFromReview(t *testing.T) {
	f := newTenancy(t)
	for _, path := range []string{"/v1/runs/" + f.done.ID + "/retry", "/v1/runs/" + f.done.ID + "/jobs/" + f.doneJob + "/retry"} {
		if s, out := f.call("POST", path, f.writerA, map[string]any{}, false); s != 403 {
			t.Fatalf("a writer without secrets retries a trusted run (%s): %d %s", path, s, out)
		}
	}
	gated := f.createRun("test", "deploy:test")
	f.exec(`UPDATE jobs SET state = 'CANCELED', reason = 'canceled', finished_at = now() WHERE run_id = $1`, gated.ID)
	f.exec(`UPDATE runs SET state = 'CANCELED', finished_at = now() WHERE id = $1`, gated.ID)
	if s, out := f.call("POST", "/v1/runs/"+gated.ID+"/jobs/"+gated.JobIDs["deploy"]+"/retry", f.global, map[string]any{}, false); s != 400 {
		t.Fatalf("a job retried without the jobs it needs: %d %s", s, out)
	}

	ava := f.member("ava", f.project.ID, "admin", false)
	for _, who := range []string{"walter", "ava"} {
		if s, out := f.call("POST", "/v1/projects/"+f.project.ID+"/members", ava,
			map[string]any{"user": who, "role": "admin", "secrets": true}, false); s != 403 {
			t.Fatalf("an admin without secrets grants them to %s: %d %s", who, s, out)
		}
	}

	// A run of other/svc older than acme/app's: before=<acme/app's run>
	// would list it if the cursor's run were looked up unchecked.
	older, err := f.store.CreateRun(context.Background(), store.NewRun{Project: "other/svc", Jobs: []store.NewJob{{Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	f.exec(`UPDATE runs SET created_at = now() - interval '1 hour' WHERE id = $1`, older.ID)
	_, real := f.call("GET", "/v1/runs?before="+f.done.ID, f.memberB, nil, false)
	_, made := f.call("GET", "/v1/runs?before=01a00000-0000-7000-8000-000000000000", f.memberB, nil, false)
	if real != made {
		t.Fatalf("?before= tells an existing run from a made-up one:\n%s\n%s", real, made)
	}
}
