package agent

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// Moving trees between S3 and the workspace: the verified source, caches
// and artifacts in; artifacts and caches out.

func (j *job) fetchSource() error {
	src, err := j.lease.Source(j.ctx)
	if err != nil {
		return err
	}
	if src.BlobDigest != j.claim.Source.BlobDigest || src.ManifestDigest != j.claim.Source.ManifestDigest {
		return fmt.Errorf("source route names %s, the claim %s", src.BlobDigest, j.claim.Source.BlobDigest)
	}
	blob, err := j.download(src.URL, src.BlobDigest, src.Size, filepath.Dir(j.ws))
	if err != nil {
		return err
	}
	defer os.Remove(blob)
	m, err := snapshot.ExtractVerified(blob, j.ws, src.ManifestDigest, snapshot.Limits{})
	if err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> source %s verified: %d entries, manifest %s\n", src.BlobDigest, len(m), src.ManifestDigest)
	return nil
}

// unpackInto downloads and verifies a blob and merges its tree into the
// workspace (or into sub, relative to it).
func (j *job) unpackInto(url, digest string, size int64, sub string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(j.ws), "unpack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	blob, err := j.download(url, digest, size, tmp)
	if err != nil {
		return err
	}
	tree := filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return err
	}
	f, err := os.Open(blob)
	if err != nil {
		return err
	}
	_, err = snapshot.Extract(f, tree, snapshot.Limits{})
	f.Close()
	if err != nil {
		return err
	}
	return merge(tree, filepath.Join(j.ws, sub))
}

// merge moves everything under src into dst, keeping what dst has.
func merge(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Rename(s, d); err != nil {
				return err
			}
		case err == nil && fi.IsDir() && e.IsDir():
			if err := merge(s, d); err != nil {
				return err
			}
		}
	}
	return nil
}

func (j *job) restoreCache() error {
	cs := j.claim.Job.Cache
	hit, err := j.lease.RestoreCache(j.ctx, append([]string{cs.Key}, cs.RestoreKeys...))
	if err != nil || hit == nil {
		if err == nil {
			fmt.Fprintf(j.logs, "==> no cache for %s\n", cs.Key)
		}
		return err
	}
	if err := j.unpackInto(hit.URL, hit.Digest, hit.Size, ""); err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> cache restored from %s\n", hit.Key)
	return nil
}

// afterPackWalk, for tests, changes the workspace between pack's walk and
// its read, as another slot's process may.
var afterPackWalk func(ws string)

// pack snapshots the given workspace paths into a temporary blob, within
// packLimits (packWalk).
func (j *job) pack(paths []string) (string, *snapshot.Result, error) {
	tree := &snapshot.Tree{Root: j.ws, Beneath: true, Owner: j.box.Owner()}
	w := &packWalk{j: j, tree: tree, owner: j.box.Owner()}
	for _, p := range paths {
		p = filepath.Clean(strings.TrimSuffix(p, "/"))
		if !filepath.IsLocal(p) {
			return "", nil, fmt.Errorf("path %s is not inside the workspace", p)
		}
		if err := w.path(p); err != nil {
			return "", nil, fmt.Errorf("path %s: %w", p, err)
		}
	}
	if afterPackWalk != nil {
		afterPackWalk(j.ws)
	}
	f, err := os.CreateTemp(filepath.Dir(j.ws), "pack-*.tar.zst")
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	res, err := snapshot.Write(f, tree)
	if err != nil {
		os.Remove(f.Name())
		return "", nil, err
	}
	return f.Name(), res, nil
}

func (j *job) upload(u protocol.UploadResponse, blob string, size int64) error {
	if u.Exists || u.KeyExists {
		return nil
	}
	// Blobs are content-addressed and written with If-None-Match, so a PUT
	// whose answer was lost is safe to repeat: it then gets 412, "exists".
	return j.transfer(func() error {
		f, err := os.Open(blob)
		if err != nil {
			return err
		}
		defer f.Close()
		return j.a.cfg.Client.Put(j.ctx, u, f, size)
	})
}

// download fetches a blob by its presigned URL and verifies it, retrying
// what a flaky network does to it: one dropped connection must not fail
// the job. A blob that does not match its digest is not retried.
func (j *job) download(url, digest string, size int64, dir string) (string, error) {
	var blob string
	err := j.transfer(func() error {
		var err error
		blob, err = snapshot.Download(j.ctx, http.DefaultClient, url, digest, size, dir)
		return err
	})
	return blob, err
}

// transferAttempts bounds the tries of one presigned download or upload.
const transferAttempts = 5

// transfer runs one S3 transfer with retries and backoff while the job
// goes on; a digest mismatch is final.
func (j *job) transfer(op func() error) error {
	b := client.Backoff{Base: 250 * time.Millisecond, Max: 4 * time.Second}
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt == transferAttempts || errors.Is(err, snapshot.ErrDigestMismatch) || j.ctx.Err() != nil {
			return err
		}
		if b.Wait(j.ctx) != nil {
			return err
		}
	}
}

func (j *job) uploadArtifact(art domain.ArtifactSpec) error {
	blob, res, err := j.pack(art.Paths)
	if err != nil {
		return err
	}
	defer os.Remove(blob)
	u, err := j.lease.StartArtifact(j.ctx, art.Name, res.BlobDigest, res.Size)
	if err == nil {
		err = j.upload(u, blob, res.Size)
	}
	if err == nil {
		err = j.lease.CommitArtifact(j.ctx, art.Name, res.BlobDigest, res.Size)
	}
	return err
}

func (j *job) saveCache() error {
	cs := j.claim.Job.Cache
	var present []string
	for _, p := range cs.Paths {
		if err := j.throughDirs(p); err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(j.ws, p)); err == nil {
			present = append(present, p)
		}
	}
	if len(present) == 0 {
		fmt.Fprintf(j.logs, "==> cache paths do not exist; nothing saved\n")
		return nil
	}
	blob, res, err := j.pack(present)
	if err != nil {
		return err
	}
	defer os.Remove(blob)
	u, err := j.lease.StartCache(j.ctx, cs.Key, res.BlobDigest, res.Size)
	if err != nil {
		return err
	}
	if u.KeyExists {
		fmt.Fprintf(j.logs, "==> cache %s exists; not saved again\n", cs.Key)
		return nil
	}
	if err := j.upload(u, blob, res.Size); err != nil {
		return err
	}
	if err := j.lease.CommitCache(j.ctx, cs.Key, res.BlobDigest, res.Size); err != nil {
		return err
	}
	fmt.Fprintf(j.logs, "==> cache saved as %s\n", cs.Key)
	return nil
}

// throughDirs refuses a workspace path reached through a symlink: the
// runner (root) reads what the steps left, and a step's link to /etc or to
// the runner's token must not put them into an artifact or a cache. The
// last element may be a link: it is kept as one. The steps are stopped by
// then, so nothing changes between this check and the read.
func (j *job) throughDirs(p string) error {
	dir := j.ws
	elems := strings.Split(filepath.ToSlash(p), "/")
	for _, e := range elems[:len(elems)-1] {
		dir = filepath.Join(dir, e)
		fi, err := os.Lstat(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("path %s: %s is not a directory (a symlink?): paths are not followed through links", p, strings.TrimPrefix(dir, j.ws+"/"))
		}
	}
	return nil
}
