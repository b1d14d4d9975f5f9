package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

// artifactsCmd is forgeci artifacts RUN [JOB] [-o DIR]: a run's artifacts,
// listed, or downloaded and unpacked.
func artifactsCmd(g *global) *cobra.Command {
	var dir string
	c := command("artifacts RUN_ID [JOB]", "List a run's artifacts, or with -o download them (checked against their digests) and unpack them into DIR/<job>/<name>",
		cobra.RangeArgs(1, 2), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
			var out struct{ Artifacts []store.ArtifactInfo }
			if err := cl.do(ctx, "GET", "/v1/runs/"+url.PathEscape(args[0])+"/artifacts", nil, &out); err != nil {
				return err
			}
			var list []store.ArtifactInfo
			for _, a := range out.Artifacts {
				if len(args) == 1 || a.Job == args[1] || a.JobID == args[1] {
					list = append(list, a)
				}
			}
			if dir == "" {
				return printTable(g, list, "JOB\tNAME\tSIZE\tDIGEST\tEXPIRES", func(a store.ArtifactInfo) []any {
					expires := "with its run"
					if a.ExpiresAt != nil {
						expires = a.ExpiresAt.UTC().Format("2006-01-02")
					}
					return []any{a.Job, a.Name, a.Size, a.Digest, expires}
				})
			}
			for _, a := range list {
				dest := filepath.Join(dir, localName(a.Job), localName(a.Name))
				if err := downloadArtifact(ctx, cl, args[0], a, dest); err != nil {
					return fmt.Errorf("artifact %s of %s: %w", a.Name, a.Job, err)
				}
				printf("%s/%s: %d bytes, %s, into %s\n", cell(a.Job), cell(a.Name), a.Size, a.Digest, cell(dest))
			}
			if len(list) == 0 {
				return fmt.Errorf("run %s has no artifacts to download", args[0])
			}
			return nil
		}))
	c.Flags().StringVarP(&dir, "output", "o", "", "download and unpack into this directory")
	return c
}

// localName is name as one element of a path in the download directory.
// A job's name is the pipeline's text ("build (linux/amd64)"; a hostile
// server's could be "../../.ssh"): a separator, a control character, or a
// name that is "", "." or ".." becomes "_", and a name so changed gets the
// start of its SHA-256, so that two names do not meet in one directory.
func localName(name string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || !printable(r) {
			return '_'
		}
		return r
	}, name)
	if safe == "" || safe == "." || safe == ".." {
		safe = "_" + safe
	}
	if safe == name {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return safe + "-" + hex.EncodeToString(sum[:4])
}

// downloadArtifact fetches an artifact through a presigned URL the API
// issues, checks its size and digest, and unpacks it into dest with the
// bounded extraction runners use.
func downloadArtifact(ctx context.Context, cl *apiClient, runID string, a store.ArtifactInfo, dest string) error {
	var dl struct {
		URL, Digest string
		Size        int64
	}
	path := "/v1/runs/" + url.PathEscape(runID) + "/jobs/" + url.PathEscape(a.JobID) + "/artifacts/" + url.PathEscape(a.Name)
	if err := cl.do(ctx, "GET", path, nil, &dl); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", dl.URL, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download: HTTP %d", resp.StatusCode)
	}
	tmp, err := os.CreateTemp("", "forgeci-artifact-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	body := &progressReader{r: io.LimitReader(resp.Body, dl.Size+1), total: dl.Size, w: os.Stderr, label: a.Name}
	n, err := io.Copy(io.MultiWriter(tmp, h), body)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); n != dl.Size || got != dl.Digest || got != a.Digest {
		return fmt.Errorf("downloaded %d bytes hashing to %s, not the %d bytes of %s", n, got, dl.Size, dl.Digest)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	_, err = snapshot.Extract(tmp, dest, snapshot.Limits{})
	return err
}
