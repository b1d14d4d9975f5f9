package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// apiClient talks to the user API.
type apiClient struct {
	server, token string
	http          *http.Client
}

func (c *apiClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.server, "/")+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return protocol.DecodeError(resp.StatusCode, raw)
	}
	if out != nil && len(raw) > 0 {
		return json.Unmarshal(raw, out)
	}
	return nil
}

type submitResult struct {
	ID     string `json:"id"`
	Number int64  `json:"number"`
	State  string `json:"state"`
	Jobs   []struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		State string `json:"state"`
	} `json:"jobs"`
}

// submitOptions are the flags of forgeci submit.
type submitOptions struct {
	Dir, Project            string
	Untracked, JSON, Follow bool
}

func submitCommand(ctx context.Context, c *apiClient, o submitOptions) error {
	dir, project, untracked, asJSON, follow := &o.Dir, &o.Project, &o.Untracked, &o.JSON, &o.Follow
	server := &c.server
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if *project == "" {
		*project = filepath.Base(abs)
	}
	run, err := submit(ctx, c, abs, *project, *untracked, os.Stderr)
	if err != nil {
		return err
	}
	if *asJSON && !*follow {
		return json.NewEncoder(os.Stdout).Encode(run)
	}
	printf("run #%d %s: %s\n", run.Number, run.ID, run.State)
	for _, j := range run.Jobs {
		printf("  %-40s %s\n", cell(j.Name), cell(j.State))
	}
	url := fmt.Sprintf("%s/runs/%s", strings.TrimRight(*server, "/"), run.ID) // the dashboard
	printf("%s\n", url)
	if !*follow {
		return nil
	}
	var state string
	err = safeLog(func(out io.Writer) (err error) {
		state, err = followRun(ctx, c, run.ID, out)
		return err
	})
	if err != nil {
		return err
	}
	printf("run #%d %s\n%s\n", run.Number, state, url)
	if state != "PASSED" {
		return exitError(1)
	}
	return nil
}

// followRun prints every job's log as it grows, prefixed with the job's
// name, and the jobs' states as they end; it returns the run's final state.
func followRun(ctx context.Context, c *apiClient, runID string, out io.Writer) (string, error) {
	type jobView struct {
		ID, Name, State string
		Generation      int
		Reason          string
	}
	var view struct {
		State    string
		Approval string
		Jobs     []jobView
	}
	toldWaiting := false
	offsets := map[string]int64{}
	gens := map[string]int{}
	reported := map[string]bool{}
	partial := map[string]string{}
	for {
		if err := c.do(ctx, "GET", "/v1/runs/"+runID, nil, &view); err != nil {
			return "", err
		}
		if view.Approval == "pending" && !toldWaiting && !isTerminal(view.State) {
			fmt.Fprintf(out, "run waits for approval: this is the first untrusted run of its author here; a project writer "+
				"runs `forgeci approve %s` (or `forgeci reject %s`), or clicks Approve in the dashboard\n", runID, runID)
			toldWaiting = true
		}
		for _, j := range view.Jobs {
			if j.Generation == 0 {
				continue
			}
			if gens[j.ID] != j.Generation { // a new attempt has its own log
				gens[j.ID], offsets[j.ID] = j.Generation, 0
			}
			for {
				data, next, err := c.log(ctx, runID, j.ID, j.Generation, offsets[j.ID])
				if err != nil {
					return "", err
				}
				if len(data) == 0 {
					break
				}
				offsets[j.ID] = next
				text := partial[j.ID] + string(data)
				lines := strings.Split(text, "\n")
				partial[j.ID] = lines[len(lines)-1]
				for _, line := range lines[:len(lines)-1] {
					fmt.Fprintf(out, "[%s] %s\n", j.Name, line)
				}
			}
		}
		for _, j := range view.Jobs {
			if !reported[j.ID] && isTerminal(j.State) {
				reported[j.ID] = true
				if p := partial[j.ID]; p != "" {
					fmt.Fprintf(out, "[%s] %s\n", j.Name, p)
				}
				msg := j.State
				if j.Reason != "" {
					msg += " (" + j.Reason + ")"
				}
				fmt.Fprintf(out, "[%s] ==> %s\n", j.Name, msg)
			}
		}
		if isTerminal(view.State) {
			return view.State, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func isTerminal(state string) bool {
	switch state {
	case "PASSED", "FAILED", "CANCELED", "ABORTED", "SKIPPED":
		return true
	}
	return false
}

// log reads a job's log bytes from offset.
func (c *apiClient) log(ctx context.Context, runID, jobID string, gen int, offset int64) ([]byte, int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET",
		fmt.Sprintf("%s/v1/runs/%s/jobs/%s/logs?generation=%d&offset=%d", strings.TrimRight(c.server, "/"), runID, jobID, gen, offset), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("read log: %w", err)
	}
	if resp.StatusCode != 200 {
		return nil, 0, protocol.DecodeError(resp.StatusCode, data)
	}
	// The text is masked: its length is not that of the stored bytes it
	// covers, so the server says where they end.
	next, err := strconv.ParseInt(resp.Header.Get("X-Next-Offset"), 10, 64)
	if err != nil || next < offset {
		return nil, 0, fmt.Errorf("read log: bad X-Next-Offset %q", resp.Header.Get("X-Next-Offset"))
	}
	return data, next, nil
}

// submit snapshots dir into a temporary file, uploads it through a
// presigned URL unless the CAS already has it, and creates the run. After
// this returns, the run depends only on the uploaded bytes.
func submit(ctx context.Context, c *apiClient, dir, project string, untracked bool, progress io.Writer) (*submitResult, error) {
	var tree *snapshot.Tree
	var err error
	if snapshot.IsGitCheckout(dir) {
		tree, err = snapshot.GitTree(dir, untracked)
	} else {
		tree, err = snapshot.DirTree(dir)
	}
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "forgeci-snapshot-*.tar.zst")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	res, err := snapshot.Write(f, tree)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "snapshot: %d entries, %d bytes, %s\n", len(res.Manifest), res.Size, res.BlobDigest)
	var up struct {
		Exists  bool              `json:"exists"`
		URL     string            `json:"upload_url"`
		Method  string            `json:"upload_method"`
		Headers map[string]string `json:"upload_headers"`
	}
	if err := c.do(ctx, "POST", "/v1/uploads", map[string]any{"project": project, "digest": res.BlobDigest, "size": res.Size}, &up); err != nil {
		return nil, fmt.Errorf("request upload: %w", err)
	}
	if !up.Exists {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, up.Method, up.URL, &progressReader{r: f, total: res.Size, w: progress, label: "upload"})
		if err != nil {
			return nil, err
		}
		req.ContentLength = res.Size
		for k, v := range up.Headers {
			req.Header.Set(k, v)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("upload snapshot: %w", err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		// 412: someone uploaded the same bytes meanwhile; blobs are immutable.
		if resp.StatusCode != 200 && resp.StatusCode != http.StatusPreconditionFailed {
			return nil, fmt.Errorf("upload snapshot: HTTP %d: %s", resp.StatusCode, msg)
		}
		fmt.Fprintln(progress)
	}
	var run submitResult
	err = c.do(ctx, "POST", "/v1/runs", map[string]any{
		"project": project, "git_sha": tree.GitSHA, "git_dirty": tree.GitDirty, "branch": tree.GitBranch,
		"source": domain.Source{BlobDigest: res.BlobDigest, ManifestDigest: res.ManifestDigest, Size: res.Size},
	}, &run)
	if err != nil {
		return nil, fmt.Errorf("create run: %w", err)
	}
	return &run, nil
}

type progressReader struct {
	r     io.Reader
	total int64
	n     int64
	w     io.Writer
	last  time.Time
	label string
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if time.Since(p.last) > 200*time.Millisecond || errors.Is(err, io.EOF) {
		p.last = time.Now()
		pct := 100.0
		if p.total > 0 {
			pct = float64(p.n) * 100 / float64(p.total)
		}
		width := 30
		done := int(pct / 100 * float64(width))
		fmt.Fprintf(p.w, "\r%s: [%s%s] %5.1f%% of %d bytes", p.label, strings.Repeat("#", done), strings.Repeat(".", width-done), pct, p.total)
	}
	return n, err
}
