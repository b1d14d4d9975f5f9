package scm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// Limits of the changed paths read for a paths filter, as GitHub's: a
// comparison lists at most 300 files, a pull request at most 3,000.
const (
	maxPushPayloadCommits = 2048
	maxPullFilePages      = 30
)

// triggered reports whether the pipeline's on: takes this delivery, and
// if not, why. The changed paths are read only when a paths filter asks.
func (w *Worker) triggered(ctx context.Context, gh *github.Client, owner, name string, ev any, baseRef string,
	pl *pipeline.Pipeline) (bool, string, error) {
	switch e := ev.(type) {
	case *github.PushEvent:
		return pl.Triggers.RunsOnPush(e.GetRef(), func() ([]string, error) { return pushChanges(ctx, gh, owner, name, e) })
	case *github.PullRequestEvent:
		number := e.GetPullRequest().GetNumber()
		return pl.Triggers.RunsOnPullRequest(e.GetAction(), baseRef, func() ([]string, error) {
			return pullChanges(ctx, gh, owner, name, number)
		})
	}
	return false, "", fmt.Errorf("no trigger for %T", ev)
}

// untriggered is why no trigger of pl takes the delivery ("" when one
// does).
func (w *Worker) untriggered(ctx context.Context, gh *github.Client, owner, name string, ev any, baseRef string,
	pl *pipeline.Pipeline) (string, error) {
	ok, why, err := w.triggered(ctx, gh, owner, name, ev, baseRef, pl)
	if err != nil || ok {
		return "", err
	}
	return "no trigger in " + pipeline.FileName + " takes it: " + why, nil
}

// pushChanges are the paths a push changed: from the payload's commits
// when it lists them all, else from GitHub's comparison of the two
// commits (of the default branch and the pushed commit, for a new
// branch).
func pushChanges(ctx context.Context, gh *github.Client, owner, name string, e *github.PushEvent) ([]string, error) {
	if e.GetForced() {
		// The commits a force push dropped changed paths too, which
		// neither the payload nor a comparison lists: GitHub runs.
		return nil, pipeline.ErrPathsUnknown
	}
	commits := e.Commits
	if e.GetBefore() != zeroSHA && len(commits) > 0 && len(commits) < maxPushPayloadCommits {
		var out []string
		for _, c := range commits {
			out = append(out, c.Added...)
			out = append(out, c.Removed...)
			out = append(out, c.Modified...)
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}
	base := e.GetBefore()
	if base == zeroSHA || base == "" {
		base = e.GetRepo().GetDefaultBranch()
	}
	cmp, resp, err := gh.Repositories.CompareCommits(ctx, owner, name, base, e.GetAfter(), nil)
	if err != nil && resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnprocessableEntity) {
		// No comparison (histories with nothing in common): GitHub runs.
		return nil, pipeline.ErrPathsUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("compare %s...%s: %w", base, e.GetAfter(), err)
	}
	var out []string
	for _, f := range cmp.Files {
		out = append(out, f.GetFilename())
	}
	return out, nil
}

// pullChanges are the paths a pull request changes.
func pullChanges(ctx context.Context, gh *github.Client, owner, name string, number int) ([]string, error) {
	var out []string
	opts := &github.ListOptions{PerPage: 100}
	for range maxPullFilePages {
		files, resp, err := gh.PullRequests.ListFiles(ctx, owner, name, number, opts)
		if err != nil {
			return nil, fmt.Errorf("files of pull request #%d: %w", number, err)
		}
		for _, f := range files {
			out = append(out, f.GetFilename())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

// pipelineAt reads the pipeline file of commit sha alone, through the
// contents API, so that a delivery no trigger takes costs no download of
// the tree, nor one whose commit has no pipeline or a broken one (refused:
// the error the tree's would be; a stranger's pull request could
// otherwise make the worker download its tree at every event). Another
// failure says "not known": the caller snapshots the tree and reads the
// file there, with its own errors.
func pipelineAt(ctx context.Context, gh *github.Client, owner, name, sha string) (pl *pipeline.Pipeline, known bool, refused error) {
	f, dir, _, err := gh.Repositories.GetContents(ctx, owner, name, pipeline.FileName, &github.RepositoryContentGetOptions{Ref: sha})
	var ge *github.ErrorResponse
	// "Not Found" is a path the commit lacks; a ref GitHub does not know
	// is "No commit found for the ref ...", left to the tarball's answer.
	if errors.As(err, &ge) && ge.Response != nil && ge.Response.StatusCode == http.StatusNotFound && ge.Message == "Not Found" {
		return nil, false, domain.Errorf(domain.EInvalid, "the commit has no %s at its root", pipeline.FileName)
	}
	notFile := domain.Errorf(domain.EInvalid, "%s must be a regular file of at most %d bytes", pipeline.FileName, pipeline.MaxFileBytes)
	if err == nil && dir != nil {
		return nil, false, notFile
	}
	if err != nil || f == nil {
		return nil, false, nil
	}
	text, err := f.GetContent() // decodes GitHub's base64
	if err != nil {
		return nil, false, nil
	}
	// A symlink to a file answers as the file it leads to, at its path.
	if f.GetType() != "file" || f.GetPath() != pipeline.FileName || len(text) > pipeline.MaxFileBytes {
		return nil, false, notFile
	}
	pl, err = pipeline.Parse(pipeline.FileName, []byte(text))
	if err != nil {
		return nil, false, pipeline.AsError(err)
	}
	return pl, true, nil
}
