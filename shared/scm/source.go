package scm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/snapshot"
	"github.com/forgeci/forgeci/shared/store"
)

// MaxTarballBytes bounds a downloaded repository tarball.
const MaxTarballBytes = 2 << 30

// commitSource is a commit turned into a ForgeCI snapshot in the CAS.
type commitSource struct {
	Source   domain.Source
	Pipeline *pipeline.Pipeline
}

// snapshotCommit fetches the repository tarball at sha, unpacks it under the
// snapshot rules into a temporary directory, re-canonicalises it into a
// snapshot (the same digests `forgeci submit` computes for that tree), puts
// the blob into the CAS namespace of the run's (project, tier) and reads
// the pipeline from the tree. Everything it
// does is idempotent: a retry after a crash makes the same blob.
func (w *Worker) snapshotCommit(ctx context.Context, gh *github.Client, owner, repo, sha string, tier store.BlobRef) (*commitSource, error) {
	link, resp, err := gh.Repositories.GetArchiveLink(ctx, owner, repo, github.Tarball,
		&github.RepositoryContentGetOptions{Ref: sha}, 1)
	if err != nil && resp != nil && resp.StatusCode == http.StatusNotFound {
		// GetArchiveLink reports a 404 as a plain error: say it is permanent.
		return nil, domain.Errorf(domain.ENotFound, "commit %s of %s/%s is not there (or the App cannot read it)", sha, owner, repo)
	}
	if err != nil {
		return nil, fmt.Errorf("tarball link of %s/%s@%s: %w", owner, repo, sha, err)
	}
	tmp, err := os.MkdirTemp(w.TempDir, "forgeci-src-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, err
	}
	if err := w.download(ctx, link.String(), tree); err != nil {
		return nil, err
	}
	content, err := readPipeline(tree)
	if err != nil {
		return nil, err
	}
	pl, err := pipeline.Parse(pipeline.FileName, content)
	if err != nil {
		return nil, pipeline.AsError(err)
	}
	t, err := snapshot.DirTree(tree)
	if err != nil {
		return nil, err
	}
	blob, err := os.Create(filepath.Join(tmp, "blob"))
	if err != nil {
		return nil, err
	}
	defer blob.Close()
	res, err := snapshot.Write(blob, t)
	if err != nil {
		return nil, err
	}
	if _, err := blob.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	// The run's creation registers the blob for its (project, tier); the
	// upload is recorded first, so that the object is collected if no run
	// does (its transaction failed), and must fit the tier's quota.
	tier.Digest = res.BlobDigest
	held, err := w.Store.PrepareBlobUpload(ctx, tier, res.Size)
	if err != nil {
		return nil, err
	}
	if !held {
		if err := w.CAS.Put(ctx, tier.Key(), res.BlobDigest, blob, res.Size); err != nil {
			return nil, err
		}
	}
	return &commitSource{
		Source:   domain.Source{BlobDigest: res.BlobDigest, ManifestDigest: res.ManifestDigest, Size: res.Size},
		Pipeline: pl,
	}, nil
}

// download streams the tarball at url into dir. The URL is GitHub's
// short-lived signed codeload link; it needs no other credential.
func (w *Worker) download(ctx context.Context, url, dir string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := w.httpClient().Do(req)
	if err != nil {
		// Not the URL: a private repository's carries a token, and the
		// error is kept on the delivery, which project readers see.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s %s: %w", ue.Op, req.URL.Host, ue.Err)
		}
		return fmt.Errorf("download tarball: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("download tarball: %s", resp.Status)
		if resp.StatusCode == http.StatusNotFound {
			return domain.Errorf(domain.ENotFound, "%v", err)
		}
		return err
	}
	err = snapshot.ExtractTarball(io.LimitReader(resp.Body, MaxTarballBytes), dir, snapshot.Limits{})
	if errors.Is(err, snapshot.ErrRefused) {
		return domain.Errorf(domain.EInvalid, "the repository tarball is refused: %v", err)
	}
	return err
}

// readPipeline reads the pipeline file through an os.Root, and only if it
// is a regular file: a symlink must not read anything outside the tree.
func readPipeline(tree string) ([]byte, error) {
	root, err := os.OpenRoot(tree)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := root.Lstat(pipeline.FileName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, domain.Errorf(domain.EInvalid, "the commit has no %s at its root", pipeline.FileName)
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > pipeline.MaxFileBytes {
		return nil, domain.Errorf(domain.EInvalid, "%s must be a regular file of at most %d bytes", pipeline.FileName, pipeline.MaxFileBytes)
	}
	return root.ReadFile(pipeline.FileName)
}
