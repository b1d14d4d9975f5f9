package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

// TestCLIMaskedLog: `forgeci secret set` refuses a value too short to
// mask, saying why; `forgeci logs --follow` shows a secret that a runner
// appended in clear, in two halves, as ***, following the stored offsets
// the server gives (the masked text is shorter than the bytes it covers).
func TestCLIMaskedLog(t *testing.T) {
	ctx := context.Background()
	st := pgtest.NewStore(t, store.Limits{})
	keys, err := secretbox.NewFileKeyring(filepath.Join(t.TempDir(), "master.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	st.SetKeyring(keys)
	pgtest.Project(t, st, "p")
	srv := httptest.NewServer((&api.Server{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler())
	defer srv.Close()
	_, token, err := st.CreateUser(ctx, "root", store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	secretSet := func(value string) error {
		return withStdin(t, value, func() error {
			root := newRoot()
			root.SetArgs([]string{"--url", srv.URL, "--token", token, "secret", "set", "--project", "p", "--name", "DEPLOY_TOKEN"})
			root.SetOut(io.Discard)
			return root.ExecuteContext(ctx)
		})
	}
	if err := secretSet("abc\n"); err == nil || !strings.Contains(err.Error(), "cannot be masked in logs") || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a 3-byte secret: %v", err)
	}
	const secret = "Zq8-hunter2-Xw7"
	if err := secretSet(secret + "\n"); err != nil {
		t.Fatal(err)
	}

	run, err := st.CreateRun(ctx, store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "deploy",
		Spec: domain.JobSpec{Secrets: []string{"DEPLOY_TOKEN"}, Steps: []domain.Step{{Run: "deploy"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg, _, _ := st.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{})
	_, rtoken, _ := st.RegisterRunner(ctx, reg, "r", nil)
	runner, err := st.AuthenticateRunner(ctx, rtoken)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, runner, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	l := c.Lease
	first := "token=" + secret[:6]
	if _, err := st.AppendLog(ctx, runner.ID, l.JobID, l, 0, []byte(first)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- printLog(ctx, newClient(srv.URL, token), run.ID, l.JobID, 0, true, &out, nil) }()
	time.Sleep(700 * time.Millisecond) // the follower polls the held-back end
	if _, err := st.AppendLog(ctx, runner.ID, l.JobID, l, int64(len(first)), []byte(secret[6:]+"\nbye\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Complete(ctx, runner.ID, l.JobID, l, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || out.String() != "token=***\nbye\n" {
			t.Fatalf("forgeci logs --follow: %q %v", out.String(), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not stop after the job ended")
	}
}
