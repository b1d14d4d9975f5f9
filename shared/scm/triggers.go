package scm

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/go-github/v62/github"

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

// pushChanges are the paths a push changed: from the payload's commits
// when it lists them all, else from GitHub's comparison of the two
// commits (of the default branch and the pushed commit, for a new
// branch).
func pushChanges(ctx context.Context, gh *github.Client, owner, name string, e *github.PushEvent) ([]string, error) {
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
	cmp, _, err := gh.Repositories.CompareCommits(ctx, owner, name, base, e.GetAfter(), nil)
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
