package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/forgeci/forgeci/runner/agent"
	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/localstack"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

// benchPipeline: end-to-end time of a 20-job pipeline of `true` steps (4
// stages of 5, each stage needing the previous) with 4 in-process runner
// agents over HTTP, real PostgreSQL and S3, beside running the same 20
// steps directly with bash, 4 at a time in stage order.
func benchPipeline(ctx context.Context, admin string, rounds int) ([]row, error) {
	stack, dropDB, err := benchStack(ctx, admin, "bench_pipeline", "bench-pipeline", 16)
	if err != nil {
		return nil, err
	}
	defer dropDB()
	defer stack.Close()
	st := stack.Store
	srv := httptest.NewServer(stack.Server(nil).Handler())
	defer srv.Close()

	dir, err := os.MkdirTemp("", "forgeci-bench-pipeline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	res, err := uploadStages(ctx, stack, dir)
	if err != nil {
		return nil, err
	}
	_, userToken, err := st.CreateUser(ctx, "bench", store.RoleAdmin)
	if err != nil {
		return nil, err
	}
	actx, stop := context.WithCancel(ctx)
	defer stop()
	for i := range 4 {
		reg, _, _ := st.CreateRegistrationToken(ctx, time.Minute, "bench", store.Scope{Untrusted: true})
		_, token, err := st.RegisterRunner(ctx, reg, fmt.Sprintf("bench-%d", i), []string{"linux"})
		if err != nil {
			return nil, err
		}
		a := agent.New(agent.Config{Client: client.New(srv.URL, token), WorkDir: filepath.Join(dir, fmt.Sprintf("w%d", i)),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		go func() { _ = a.Run(actx) }()
	}
	time.Sleep(300 * time.Millisecond) // runners are long-polling
	body, _ := json.Marshal(map[string]any{"project": "bench", "source": map[string]any{
		"blob_digest": res.BlobDigest, "manifest_digest": res.ManifestDigest, "size": res.Size}})
	var ours, theirs []float64
	for range max(1, rounds) {
		took, err := runPipeline(ctx, st, srv.URL, userToken, body)
		if err != nil {
			return nil, err
		}
		ours = append(ours, took.Seconds())
		start := time.Now()
		for range 4 { // four stages of five, four at a time: two waves each
			if out, err := exec.Command("bash", "-c", "for w in 1 2; do for i in 1 2 3 4; do bash -eo pipefail -c true & done; wait; done").CombinedOutput(); err != nil {
				return nil, fmt.Errorf("baseline: %v %s", err, out)
			}
		}
		theirs = append(theirs, time.Since(start).Seconds())
	}
	return []row{{name: "20-job pipeline of true, 4 runners", figure: median(ours) * 1000, baseline: median(theirs) * 1000,
		unit: "ms", baselineName: "the steps run by bash directly", goal: 0}}, nil
}

// uploadStages makes the project bench and puts into it a snapshot whose
// pipeline is 4 stages of 5 jobs of true, each stage needing the last.
func uploadStages(ctx context.Context, stack *localstack.Stack, dir string) (*snapshot.Result, error) {
	var yml strings.Builder
	yml.WriteString("jobs:\n")
	for stage := range 4 {
		for k := range 5 {
			fmt.Fprintf(&yml, "  s%dj%d:\n    runs-on: linux\n", stage, k)
			if stage > 0 {
				fmt.Fprintf(&yml, "    needs: [s%dj0, s%dj1, s%dj2, s%dj3, s%dj4]\n", stage-1, stage-1, stage-1, stage-1, stage-1)
			}
			yml.WriteString("    steps: [{run: 'true'}]\n")
		}
	}
	src := filepath.Join(dir, "src")
	_ = os.Mkdir(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, ".forgeci.yml"), []byte(yml.String()), 0o644); err != nil {
		return nil, err
	}
	tree, _ := snapshot.DirTree(src)
	var blob bytes.Buffer
	res, err := snapshot.Write(&blob, tree)
	if err != nil {
		return nil, err
	}
	project, err := stack.Store.CreateProject(ctx, "bench", "main")
	if err != nil {
		return nil, err
	}
	// The bench user is a global admin: its runs are trusted.
	return res, stack.CAS.Put(ctx, cas.BlobKey(project.ID, true, res.BlobDigest), res.BlobDigest, bytes.NewReader(blob.Bytes()), res.Size)
}

// runPipeline creates a run through the API and waits for it to pass.
func runPipeline(ctx context.Context, st *store.Store, server, token string, body []byte) (time.Duration, error) {
	start := time.Now()
	req, _ := http.NewRequest("POST", server+"/v1/runs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	var run struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return 0, fmt.Errorf("create run: HTTP %d", resp.StatusCode)
	}
	for {
		r, err := st.GetRun(ctx, run.ID)
		if err != nil {
			return 0, err
		}
		if r.State == "PASSED" {
			return time.Since(start), nil
		}
		if r.FinishedAt != nil {
			return 0, fmt.Errorf("pipeline ended %s", r.State)
		}
		if time.Since(start) > 2*time.Minute {
			return 0, fmt.Errorf("pipeline did not finish in 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// benchStack is the local stack over a fresh database (dropped by
// dropDB) and the test S3 server that forgeci services started.
func benchStack(ctx context.Context, admin, name, bucket string, conns int32) (stack *localstack.Stack, dropDB func(), err error) {
	url, drop, err := freshDatabase(ctx, admin, name)
	if err != nil {
		return nil, nil, err
	}
	stack, err = localstack.Start(ctx, localstack.Options{DatabaseURL: url, MaxConns: conns, S3: cas.Config{Bucket: bucket,
		Endpoint: os.Getenv("FORGECI_TEST_S3_ENDPOINT"), AccessKey: os.Getenv("FORGECI_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("FORGECI_TEST_S3_SECRET_KEY"), Region: os.Getenv("FORGECI_TEST_S3_REGION")}})
	if err != nil {
		drop()
		return nil, nil, err
	}
	return stack, drop, nil
}
