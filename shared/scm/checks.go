package scm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

var shaRE = domain.LazyRegexp(`^[0-9a-f]{40}$`)

const zeroSHA = "0000000000000000000000000000000000000000"

// NoticeCheckName names the check run that reports a commit ForgeCI could
// not run (its pipeline file is missing or invalid).
const NoticeCheckName = "forgeci"

// pushClaimed pushes one leased check run, giving up at three quarters of
// its lease (Worker.CheckLease), and records a failed push to be tried
// again after a backoff.
func (w *Worker) pushClaimed(ctx context.Context, cw store.CheckWork) (pushed bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, w.CheckLease*3/4)
	err = w.pushCheck(pctx, cw)
	cancel()
	if err == nil {
		w.reviveRefused(ctx, cw.RepoID)
		return true, nil
	}
	if unauthorized(err) {
		w.App.Forget(cw.RepoID)
	}
	attempt := cw.Attempts + 1
	var known int64
	if pe := (*pushError)(nil); errors.As(err, &pe) {
		known = pe.id
	}
	lasting := gone(err)
	goneInARow := 0
	if lasting {
		goneInARow = cw.GoneAttempts + 1
	}
	if goneInARow >= w.MaxCheckAttempts {
		w.Log.Error("check run push given up", "job", cw.JobID, "external_id", cw.ExternalID, "attempts", attempt, "err", err)
		err = w.Store.CheckGivenUp(ctx, cw, known, fmt.Errorf("given up after %d refusals in a row: %w", goneInARow, err))
	} else {
		w.Log.Warn("check run push failed", "job", cw.JobID, "attempt", attempt, "err", err)
		err = w.Store.CheckFailed(ctx, cw, known, err, w.checkWait(attempt, goneInARow), lasting)
	}
	if err != nil && !errors.Is(err, store.ErrCheckLeaseLost) {
		return false, err
	}
	return false, nil
}

// reviveRefused: GitHub took a push for the repository, so the access its
// refusals meant is back (the App installed again, a permission given
// back): the repository's check runs refused for long (waiting hours, or
// given up) are pushed now, once each until their job changes, so that a
// job that ended while GitHub refused shows its end. Best effort: the
// next push for the repository tries again.
func (w *Worker) reviveRefused(ctx context.Context, repoID int64) {
	n, err := w.Store.ReviveRefusedChecks(ctx, repoID, min(checkPatience, w.MaxCheckAttempts))
	if err != nil {
		w.Log.Warn("check runs refused before are not due again yet", "repository", repoID, "err", err)
	} else if n > 0 {
		w.Log.Info("GitHub takes pushes again: check runs it refused are due", "repository", repoID, "check_runs", n)
	}
}

const (
	// DefaultMaxCheckAttempts bounds the pushes in a row of a check run
	// GitHub refuses as gone (see gone: an App uninstalled or suspended,
	// a repository deleted): the first checkPatience wait Backoff (about
	// half an hour in all), the rest checkLongWait each, so that it is
	// given up after about two days, having woken the database a few
	// times a day rather than every ten minutes forever. Other failures
	// (5xx, rate limits, the network: an outage) wait Backoff, are never
	// given up, and start the count of refusals again.
	DefaultMaxCheckAttempts = 16
	checkPatience           = 8
	checkLongWait           = 6 * time.Hour
)

// checkWait is how long a check run waits after its attempt-th failed
// push, the goneInARow-th refusal as gone in a row (0: not one).
func (w *Worker) checkWait(attempt, goneInARow int) time.Duration {
	if goneInARow >= checkPatience {
		return checkLongWait
	}
	return w.Backoff(attempt)
}

// gone reports whether GitHub refused a check run's push for a reason
// that lasts: permanent (404, 410, 422), or 401 and 403, which GitHub
// answers for a suspended installation or a permission taken away (its
// rate limits are errors of their own types).
func gone(err error) bool {
	switch statusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden:
		return true
	}
	return permanent(err)
}

// pushCheck makes GitHub's check run for one job show the job as it is now.
// The check run is created once: the outbox commits create_attempted before
// the create is sent, and a later attempt that finds it set but no ID
// (the response was lost) looks the check run up by its external_id.
// The push goes by the repository's recorded name; a repository renamed
// since, or whose name another registered one took (marked stale), is
// asked for its name by its ID, and the push made again there.
func (w *Worker) pushCheck(ctx context.Context, cw store.CheckWork) error {
	gh, err := w.App.Client(ctx, cw.InstallationID, cw.RepoID)
	if err != nil {
		return err
	}
	if !store.StaleRepositoryName(cw.RepoFullName) {
		err = w.pushCheckAt(ctx, gh, cw)
		if statusOf(err) != http.StatusNotFound {
			return err
		}
	}
	name, nerr := w.currentName(ctx, gh, store.Repository{GitHubID: cw.RepoID, FullName: cw.RepoFullName})
	if nerr != nil {
		return errors.Join(err, nerr)
	}
	if name == cw.RepoFullName && err != nil {
		return err // not renamed: the 404 is the check run's
	}
	cw.RepoFullName = name
	return w.pushCheckAt(ctx, gh, cw)
}

// pushCheckAt is pushCheck by the name cw holds.
func (w *Worker) pushCheckAt(ctx context.Context, gh *github.Client, cw store.CheckWork) error {
	owner, repo, err := splitFullName(cw.RepoFullName)
	if err != nil {
		return err
	}
	id := cw.GitHubID
	if id == 0 && cw.CreateAttempted {
		if id, err = findCheck(ctx, gh, owner, repo, cw); err != nil {
			return err
		}
	}
	d := w.describe(cw)
	if id == 0 {
		if err := w.Store.MarkCheckCreateAttempted(ctx, cw); err != nil {
			return err
		}
		var cr *github.CheckRun
		err := withPlainOutput(d.output, func(out *github.CheckRunOutput) (err error) {
			cr, _, err = gh.Checks.CreateCheckRun(ctx, owner, repo, github.CreateCheckRunOptions{
				Name: cw.Name, HeadSHA: cw.HeadSHA, ExternalID: github.String(cw.ExternalID), DetailsURL: d.detailsURL,
				Status: github.String(d.status), Conclusion: d.conclusion, StartedAt: d.startedAt,
				CompletedAt: d.completedAt, Output: out,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("create check run: %w", err)
		}
		return w.Store.CheckPushed(ctx, cw, cr.GetID())
	}
	err = withPlainOutput(d.output, func(out *github.CheckRunOutput) error {
		_, _, err := gh.Checks.UpdateCheckRun(ctx, owner, repo, id, github.UpdateCheckRunOptions{
			Name: cw.Name, ExternalID: github.String(cw.ExternalID), DetailsURL: d.detailsURL,
			Status: github.String(d.status), Conclusion: d.conclusion, CompletedAt: d.completedAt, Output: out,
		})
		return err
	})
	if err != nil {
		// Keep the ID: the next attempt goes straight to the update.
		return &pushError{id: id, err: fmt.Errorf("update check run %d: %w", id, err)}
	}
	return w.Store.CheckPushed(ctx, cw, id)
}

// withPlainOutput sends with output, and if GitHub refuses it as invalid
// (422: an output past one of its bounds that clipping did not foresee,
// an annotation's path it does not take) once more with the title and a
// summary that says where the rest is: the check run must still show the
// job's state, or a required check never completes.
func withPlainOutput(output *github.CheckRunOutput, send func(*github.CheckRunOutput) error) error {
	err := send(output)
	if output == nil || statusOf(err) != http.StatusUnprocessableEntity {
		return err
	}
	return send(&github.CheckRunOutput{Title: github.String(clip(output.GetTitle(), maxAnnotationTitleBytes)),
		Summary: github.String("GitHub refused this job's report; its page in ForgeCI shows it.")})
}

// pushError is a failed push that learnt the check run's ID first.
type pushError struct {
	id  int64
	err error
}

func (e *pushError) Error() string { return e.err.Error() }
func (e *pushError) Unwrap() error { return e.err }

// findCheck looks for the check run a lost create made: on the commit, by
// name, with this job's external_id. 0 means none exists.
func findCheck(ctx context.Context, gh *github.Client, owner, repo string, cw store.CheckWork) (int64, error) {
	opts := &github.ListCheckRunsOptions{CheckName: github.String(cw.Name), Filter: github.String("all"),
		ListOptions: github.ListOptions{PerPage: 100}}
	for {
		res, resp, err := gh.Checks.ListCheckRunsForRef(ctx, owner, repo, cw.HeadSHA, opts)
		if err != nil {
			return 0, fmt.Errorf("look up check run: %w", err)
		}
		for _, cr := range res.CheckRuns {
			if cr.GetExternalID() == cw.ExternalID {
				return cr.GetID(), nil
			}
		}
		if resp.NextPage == 0 {
			return 0, nil
		}
		opts.Page = resp.NextPage
	}
}

type checkView struct {
	status      string
	conclusion  *string
	startedAt   *github.Timestamp
	completedAt *github.Timestamp
	detailsURL  *string
	output      *github.CheckRunOutput
}

// finishedChecks is the conclusion and title of a check run whose job
// state ends it.
var finishedChecks = map[string]struct{ conclusion, title string }{
	domain.JobPassed:   {"success", "Passed"},
	domain.JobFailed:   {"failure", "Failed"},
	domain.JobCanceled: {"cancelled", "Canceled"},
	// The runner lost its lease: the step may or may not have finished.
	domain.JobAborted: {"failure", "Aborted: the runner stopped answering"},
	domain.JobSkipped: {"skipped", "Skipped"},
}

// checkState is a job's check-run conclusion ("" while it is not finished)
// and title.
func checkState(cw store.CheckWork) (conclusion, title string) {
	if cw.JobState == domain.JobFailed && (strings.Contains(cw.Reason, "timeout") || strings.Contains(cw.Reason, "timed out")) {
		return "timed_out", "Timed out"
	}
	if f, ok := finishedChecks[cw.JobState]; ok {
		return f.conclusion, f.title
	}
	switch {
	case cw.JobState == domain.JobRunning:
		return "", fmt.Sprintf("Running (attempt %d)", cw.Generation)
	case cw.JobState == domain.JobPending && cw.Reason == store.ReasonWaitingApproval:
		return "", "Waiting for approval"
	case cw.JobState == domain.JobPending:
		return "", "Pending"
	}
	return "", "Queued"
}

// describe maps a job's state to a check run's.
func (w *Worker) describe(cw store.CheckWork) checkView {
	if cw.JobID == "" {
		return checkView{status: "completed", conclusion: github.String("failure"),
			output: &github.CheckRunOutput{Title: github.String("Not run: the pipeline file is missing or invalid"),
				Summary: github.String("ForgeCI did not run this commit.\n\n" + mdBlock(clip(cw.Notice, maxSummaryBytes-100)))}}
	}
	v := checkView{status: "queued"}
	if cw.JobState == domain.JobRunning {
		v.status = "in_progress"
	}
	conclusion, title := checkState(cw)
	if conclusion != "" {
		v.conclusion = github.String(conclusion)
	}
	if v.conclusion != nil {
		v.status = "completed"
		if cw.FinishedAt != nil {
			v.completedAt = &github.Timestamp{Time: *cw.FinishedAt}
		}
	}
	if cw.StartedAt != nil {
		v.startedAt = &github.Timestamp{Time: *cw.StartedAt}
	}
	// The job's name may be a fork's (a matrix's values): a code span.
	summary := fmt.Sprintf("Job %s of %s run #%d: %s.", mdCode(cw.Name), cw.Project, cw.RunNumber, cw.JobState)
	if cw.Generation > 0 {
		summary += fmt.Sprintf(" Attempt %d.", cw.Generation)
	}
	if cw.Reason != "" {
		summary += " Reason: " + mdCode(cw.Reason) + "." // may name a fork's concurrency group or job
	}
	if (cw.Approval == store.ApprovalApproved || cw.Approval == store.ApprovalRejected) && cw.ApprovalAt != nil {
		summary += fmt.Sprintf(" The run (from a first-time contributor) was %s by %s at %s.", cw.Approval, cw.ApprovalBy,
			cw.ApprovalAt.UTC().Format(time.RFC3339))
	}
	if cw.Reason == store.ReasonWaitingApproval {
		summary += fmt.Sprintf("\n\nThis pull request comes from a first-time contributor: a member of %s with the write role "+
			"approves or rejects run #%d in the dashboard, or with `forgeci approve %s` / `forgeci reject %s`. "+
			"The run's other jobs get their check runs once it is approved.",
			cw.Project, cw.RunNumber, cw.RunID, cw.RunID)
	}
	if cw.ExitCode != nil {
		summary += fmt.Sprintf(" Exit code %d.", *cw.ExitCode)
	}
	if w.PublicURL != "" {
		u := strings.TrimSuffix(w.PublicURL, "/") + "/runs/" + cw.RunID + "/jobs/" + cw.JobID
		v.detailsURL = &u
		summary += fmt.Sprintf("\n\n[Log](%s)", u)
	}
	v.output = &github.CheckRunOutput{Title: github.String(title), Summary: github.String(clip(summary, maxSummaryBytes))}
	if conclusion != "" {
		withReport(v.output, title, cw.Report)
	}
	return v
}
