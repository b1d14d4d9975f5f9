// Package scm is ForgeCI's GitHub integration behind the webhook intake:
// it processes recorded deliveries into runs, as leased work that may be
// reclaimed, and mirrors every job of such a run to a GitHub Check run
// through an outbox that a reconciler pushes until GitHub agrees.
package scm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// Defaults of the worker.
const (
	DefaultDeliveryLease = 5 * time.Minute
	DefaultMaxAttempts   = 5
	// DefaultCheckLease is how long a worker owns one check run's push: a
	// push makes up to three GitHub calls of at most 30 s each.
	DefaultCheckLease = 2 * time.Minute
	// MaxPushAge is how long after GitHub took a push (the signed
	// repository.pushed_at) its delivery makes a run whatever its ref
	// names now (Worker.replayed). Deliveries are deduplicated by ID and
	// body (push bodies for store.PushMemory), and GitHub redelivers only
	// the last few days' hooks: a signed push body sent again later (from
	// a delivery log) must not rebuild, with secrets, a commit the branch
	// has long left behind.
	MaxPushAge = 7 * 24 * time.Hour
)

// Worker processes deliveries and reconciles check runs. Several may run at
// once (Lambda containers, the dev stack); PostgreSQL leases keep them from
// doing the same work twice in effect.
type Worker struct {
	Store *store.Store
	CAS   *cas.Store
	App   *App
	Log   *slog.Logger
	// PublicURL is the dashboard's base URL, for check runs' details links.
	PublicURL string
	// DeliveryLease is how long a worker owns a delivery; a worker that
	// dies is replaced after it. MaxAttempts bounds retries.
	DeliveryLease time.Duration
	MaxAttempts   int
	// MaxCheckAttempts bounds a check run's failed pushes: the last one's
	// error stays on it until its job changes, which starts the count
	// again (as a success does).
	MaxCheckAttempts int
	// CheckLease is how long a worker owns a check run's push. The push
	// gives up at three quarters of it, so that a call cut short has the
	// last quarter to land at GitHub before another worker may take the
	// row: two pushes of one check run never overlap (a second create of
	// it, or an old state sent after a newer one).
	CheckLease time.Duration
	// Backoff returns the wait before attempt n+1 (n >= 1).
	Backoff func(n int) time.Duration
	// TempDir holds source trees while they are snapshotted ("" for the
	// system's; /tmp on Lambda).
	TempDir string
	// HTTP downloads tarballs (nil: a client with a 10-minute timeout).
	HTTP *http.Client
	// Margin is what a pass keeps of its invocation's time (its context's
	// deadline) to record the failure of a delivery cut off at the end,
	// and its next time (default 15 s): a Lambda killed at its timeout
	// records nothing, and the delivery waited out its lease.
	Margin time.Duration
}

func (w *Worker) defaults() {
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.DeliveryLease == 0 {
		w.DeliveryLease = DefaultDeliveryLease
	}
	if w.MaxAttempts == 0 {
		w.MaxAttempts = DefaultMaxAttempts
	}
	if w.CheckLease == 0 {
		w.CheckLease = DefaultCheckLease
	}
	if w.MaxCheckAttempts == 0 {
		w.MaxCheckAttempts = DefaultMaxCheckAttempts
	}
	if w.Backoff == nil {
		w.Backoff = ExponentialBackoff(10*time.Second, 10*time.Minute)
	}
	if w.Margin == 0 {
		w.Margin = 15 * time.Second
	}
}

func (w *Worker) httpClient() *http.Client {
	if w.HTTP != nil {
		return w.HTTP
	}
	return &http.Client{Timeout: 10 * time.Minute}
}

// ExponentialBackoff doubles from base up to max.
func ExponentialBackoff(base, max time.Duration) func(int) time.Duration {
	return func(n int) time.Duration {
		d := base
		for i := 1; i < n && d < max; i++ {
			d *= 2
		}
		return min(d, max)
	}
}

// Result counts what one pass did.
type Result struct {
	Runs, Ignored, Failed, Retried int
	ChecksPushed, CheckErrors      int
}

// RunOnce processes every due delivery, pushing some due check runs after
// each, then the rest of them. It stops early when ctx is done; what it
// leaves is due again later.
func (w *Worker) RunOnce(ctx context.Context) (Result, error) {
	w.defaults()
	var res Result
	work := ctx // the work's, which ends w.Margin before ctx does
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		work, cancel = context.WithDeadline(ctx, dl.Add(-w.Margin))
		defer cancel()
	}
	for work.Err() == nil {
		d, err := w.Store.ClaimDelivery(work, w.DeliveryLease)
		if err != nil {
			return res, err
		}
		if d == nil {
			return res, w.pushChecks(work, -1, &res) // the rest
		}
		w.processDelivery(ctx, work, d, &res)
		if err := w.pushChecks(work, checksPerDelivery, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// checksPerDelivery is how many check runs a pass pushes after each
// delivery it takes, so that a flood of deliveries (a fork's pushes) does
// not hold every commit's checks back until it is drained.
const checksPerDelivery = 5

// pushChecks pushes up to limit (< 0: every) check run due, one at a
// time: its lease starts when its push does.
func (w *Worker) pushChecks(ctx context.Context, limit int, res *Result) error {
	for i := 0; ctx.Err() == nil && (limit < 0 || i < limit); i++ {
		work, err := w.Store.ClaimChecks(ctx, 1, w.CheckLease)
		if err != nil || len(work) == 0 {
			return err
		}
		pushed, err := w.pushClaimed(ctx, work[0])
		if err != nil {
			return err
		}
		if pushed {
			res.ChecksPushed++
		} else {
			res.CheckErrors++
		}
	}
	return nil
}

// Pass is RunOnce as a scheduled pass: it returns when the worker must
// next run (the next delivery or check notice due; zero: none pending).
func (w *Worker) Pass(ctx context.Context) (time.Time, error) {
	res, err := w.RunOnce(ctx)
	if err != nil || res != (Result{}) {
		w.Log.Info("scm pass", "runs", res.Runs, "ignored", res.Ignored, "failed", res.Failed,
			"retried", res.Retried, "checks_pushed", res.ChecksPushed, "check_errors", res.CheckErrors, "err", err)
	}
	if err != nil {
		return time.Time{}, err
	}
	return w.Store.NextSCM(ctx)
}

// Loop runs passes until ctx ends (each only when due, scheduled.Run):
// at once when kick fires, else every
// interval. The dev stack uses it; in AWS the scm function is invoked on a
// schedule and by the webhook function.
func (w *Worker) Loop(ctx context.Context, every time.Duration, kick <-chan struct{}) {
	kicked := false
	for {
		var err error
		if kicked {
			err = scheduled.RunKicked(ctx, w.Store, wake.SCM, w.Pass)
		} else {
			_, err = scheduled.Run(ctx, w.Store, wake.SCM, w.Pass)
		}
		if err != nil && ctx.Err() == nil {
			w.Log.Error("scm pass failed", "err", err)
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-kick:
			kicked = true
			t.Stop()
		case <-t.C:
			kicked = false
		}
	}
}

// processDelivery turns one claimed delivery into its effect, or records
// why not. An error here never escapes: it is the delivery's to keep.
// processDelivery does delivery d's work under work's deadline, and
// records its outcome under ctx's, later.
func (w *Worker) processDelivery(ctx, work context.Context, d *store.Delivery, res *Result) {
	log := w.Log.With("delivery", d.GUID, "event", d.Event, "attempt", d.Attempts)
	if d.Attempts > w.MaxAttempts {
		// Its last worker died holding it: give up rather than loop.
		err := fmt.Errorf("abandoned: %d attempts did not finish (last error: %s)", d.Attempts-1, d.LastError)
		if err := w.Store.FailDelivery(ctx, d, err, true, w.MaxAttempts, 0); err != nil {
			log.Error("mark delivery failed", "err", err)
		}
		res.Failed++
		return
	}
	run, note, sha, err := w.deliver(work, d)
	switch {
	case err != nil && domain.ErrorCode(err) == domain.EInvalid && shaRE().MatchString(sha):
		// The commit cannot make a run (no or a broken pipeline file):
		// fail the delivery and tell the author on the commit.
		log.Warn("delivery made no run", "err", err)
		if ferr := w.Store.FailDeliveryWithNotice(ctx, d, err, sha, NoticeCheckName); ferr != nil {
			log.Error("record delivery failure", "err", ferr)
		}
		res.Failed++
	case errors.Is(err, store.ErrDeliveryLeaseLost):
		log.Warn("delivery was reclaimed by another worker; this attempt's effect was rolled back")
	case err != nil:
		if unauthorized(err) {
			w.App.Forget(d.RepositoryID) // the retry asks for a new token
		}
		perm := permanent(err) || domain.ErrorCode(err) == domain.EInvalid || domain.ErrorCode(err) == domain.ENotFound
		log.Warn("delivery failed", "permanent", perm, "err", err)
		if ferr := w.Store.FailDelivery(ctx, d, err, perm, w.MaxAttempts, w.Backoff(d.Attempts)); ferr != nil {
			log.Error("record delivery failure", "err", ferr)
		}
		if perm || d.Attempts >= w.MaxAttempts {
			res.Failed++
		} else {
			res.Retried++
		}
	case run == nil:
		if err := w.Store.IgnoreDelivery(ctx, d, note); err != nil {
			log.Error("mark delivery ignored", "err", err)
		}
		res.Ignored++
	default:
		log.Info("delivery created a run", "run", run.ID, "project", run.Project, "number", run.Number)
		res.Runs++
	}
}

// currentName is the name GitHub gives the repository now, by its ID
// (renamed or transferred, its registered name may be another's now),
// recorded for the check runs' pushes.
func (w *Worker) currentName(ctx context.Context, gh *github.Client, repo store.Repository) (string, error) {
	r, _, err := gh.Repositories.GetByID(ctx, repo.GitHubID)
	if err != nil {
		return "", fmt.Errorf("repository %d (registered as %s): %w", repo.GitHubID, repo.FullName, err)
	}
	if name := r.GetFullName(); name != repo.FullName {
		if err := w.Store.RenameRepository(ctx, repo.GitHubID, name); err != nil {
			return "", err
		}
		return name, nil
	}
	return repo.FullName, nil
}

// deliver does what a delivery asks: a run for a push or an opened or
// updated pull request, nothing (with a note) otherwise.
func (w *Worker) deliver(ctx context.Context, d *store.Delivery) (run *store.Run, note, sha string, err error) {
	repo, err := w.Store.Repository(ctx, d.RepositoryID)
	if err != nil {
		return nil, "", "", err
	}
	ev, note, err := passOver(d)
	if note != "" || err != nil {
		return nil, note, "", err
	}
	gh, err := w.App.Client(ctx, repo.InstallationID, repo.GitHubID)
	if err != nil {
		return nil, "", "", err
	}
	if repo.FullName, err = w.currentName(ctx, gh, repo); err != nil {
		return nil, "", "", err
	}
	owner, name, err := splitFullName(repo.FullName)
	if err != nil {
		return nil, "", "", err
	}
	switch d.Event {
	case store.EventDispatch:
		return w.dispatch(ctx, gh, d, repo, owner, name)
	case store.EventSchedule:
		return w.scheduled(ctx, gh, d, repo, owner, name)
	}
	nr := store.NewRun{Project: repo.Project, EventAt: d.ReceivedAt}
	switch e := ev.(type) {
	case *github.PushEvent:
		if sha, note, err = w.pushRun(ctx, gh, repo, owner, name, e, d.ReceivedAt, &nr); note != "" || err != nil {
			return nil, note, "", err
		}
	case *github.PullRequestEvent:
		if sha, err = w.pullRequestRun(ctx, gh, repo, owner, name, e.GetPullRequest().GetNumber(), &nr); err != nil {
			return nil, "", sha, err
		}
	}
	if !shaRE().MatchString(sha) {
		return nil, "", "", domain.Errorf(domain.EInvalid, "the %s payload has no commit SHA", d.Event)
	}
	nr.GitSHA = sha
	if note, err := w.alreadyWaiting(ctx, repo, nr); note != "" || err != nil {
		return nil, note, sha, err
	}
	// The pipeline file alone first: a delivery no trigger takes, or whose
	// commit has no pipeline or a broken one, costs no download of the tree.
	pl, ok, refused := pipelineAt(ctx, gh, owner, name, sha)
	if refused != nil {
		return nil, "", sha, refused
	}
	if ok {
		if err := w.followSchedules(ctx, gh, owner, name, ev, repo, pl); err != nil {
			return nil, "", sha, err
		}
		if note, err := w.untriggered(ctx, gh, owner, name, ev, nr.BaseRef, pl); note != "" || err != nil {
			return nil, note, sha, err
		}
	}
	src, err := w.snapshotCommit(ctx, gh, owner, name, sha, store.BlobRef{ProjectID: repo.ProjectID, Trusted: !nr.Untrusted})
	if err != nil {
		return nil, "", sha, err
	}
	if err := w.followSchedules(ctx, gh, owner, name, ev, repo, src.Pipeline); err != nil {
		return nil, "", sha, err
	}
	if note, err := w.untriggered(ctx, gh, owner, name, ev, nr.BaseRef, src.Pipeline); note != "" || err != nil {
		return nil, note, sha, err
	}
	nr.Source, nr.Jobs = src.Source, src.Pipeline.Jobs
	nr.Workflow, nr.Concurrency, nr.Schedules = src.Pipeline.WorkflowName(), src.Pipeline.Concurrency, src.Pipeline.Schedules()
	nr.RunName = src.Pipeline.RunName
	nr.Checks = &store.CheckTarget{RepositoryID: repo.GitHubID, HeadSHA: sha}
	created, err := w.Store.CompleteDeliveryWithRun(ctx, d, nr)
	if err != nil {
		return nil, "", sha, err
	}
	return &created, "", sha, nil
}

// passOver parses a webhook delivery's payload and says, before any call
// to GitHub, why it makes no run: a branch or tag deleted, a pull request
// activity no trigger can name, an event that makes none.
func passOver(d *store.Delivery) (ev any, note string, err error) {
	if d.Event == store.EventDispatch || d.Event == store.EventSchedule {
		return nil, "", nil
	}
	ev, err = github.ParseWebHook(d.Event, d.Payload)
	if err != nil {
		return nil, "", domain.Errorf(domain.EInvalid, "payload does not parse: %v", err)
	}
	switch e := ev.(type) {
	case *github.PushEvent:
		if e.GetDeleted() || e.GetAfter() == "" || e.GetAfter() == zeroSHA {
			return nil, "branch or tag deleted", nil
		}
	case *github.PullRequestEvent:
		// The pipeline's on.pull_request.types decide which of these run.
		if !slices.Contains(pipeline.PullRequestTypes, e.GetAction()) {
			return nil, "pull request " + e.GetAction(), nil
		}
	default:
		return nil, "event " + d.Event + " does not create runs", nil
	}
	return ev, "", nil
}

// alreadyWaiting says why an untrusted run of nr's commit is not made: one
// already waits for approval. Another event there (an edited title, a
// label) would add nothing but the cost of a snapshot.
func (w *Worker) alreadyWaiting(ctx context.Context, repo store.Repository, nr store.NewRun) (string, error) {
	if !nr.Untrusted {
		return "", nil
	}
	id, err := w.Store.WaitingForApproval(ctx, repo.ProjectID, repo.GitHubID, nr.GitRef, nr.GitSHA, nr.Actor)
	if id == "" || err != nil {
		return "", err
	}
	return "run " + id + " of this commit already waits for approval", nil
}

// pushRun fills in a push's run and returns the commit to build, or why
// it builds nothing (a replay; deletions are passed over before).
func (w *Worker) pushRun(ctx context.Context, gh *github.Client, repo store.Repository, owner, name string,
	e *github.PushEvent, at time.Time, nr *store.NewRun) (sha, note string, err error) {
	if !strings.HasPrefix(e.GetRef(), "refs/") || e.GetPusher() == nil {
		return "", "", domain.Errorf(domain.EInvalid, "the push payload names no ref or pusher")
	}
	if note, err := w.replayed(ctx, gh, repo, owner, name, e, at); note != "" || err != nil {
		return "", note, err
	}
	// A push to the repository's own refs: whoever pushed could.
	nr.GitRef, nr.Trigger = e.GetRef(), "github:push "+e.GetRef()
	nr.Scope, nr.Actor = e.GetRef(), fmt.Sprintf("github:%d", e.GetSender().GetID())
	return e.GetAfter(), "", nil
}

// replayed says why push e, received at, is not built: GitHub took it more
// than MaxPushAge before (its signed repository.pushed_at) and its ref no
// longer names its commit, as the App sees it now; or more than
// store.PushHorizon before, or before push bodies were remembered. A tag
// made through the API may not move pushed_at; it still names its commit,
// and is built. A replay of a push built already, whatever its ref names,
// is refused at its recording (store.RecordDelivery remembers push
// bodies).
func (w *Worker) replayed(ctx context.Context, gh *github.Client, repo store.Repository, owner, name string,
	e *github.PushEvent, at time.Time) (string, error) {
	pushed := e.GetRepo().GetPushedAt().Time
	if pushed.IsZero() || at.Sub(pushed) <= MaxPushAge {
		return "", nil
	}
	since, err := w.Store.PushesRememberedSince(ctx)
	if err != nil {
		return "", err
	}
	if at.Sub(pushed) > store.PushHorizon || pushed.Before(since) {
		// Older than any push body ForgeCI still remembers: whether it
		// was built already cannot be told.
		return fmt.Sprintf("a push of %s made %s, received %d days later: older than the pushes ForgeCI remembers, so possibly a replay; push again to build it",
			e.GetAfter(), pushed.UTC().Format(time.RFC3339), int(at.Sub(pushed).Hours()/24)), nil
	}
	now, err := w.resolve(ctx, gh, repo, owner, name, e.GetRef())
	if err != nil && domain.ErrorCode(err) != domain.ENotFound {
		return "", err
	}
	// An annotated tag's push names the tag object in after, and its
	// commit in head_commit, which is what the ref resolves to.
	if now == e.GetAfter() || now == e.GetHeadCommit().GetID() {
		return "", nil
	}
	return fmt.Sprintf("a push of %s made %s, received more than %d days later, and %s has moved on: a replay",
		e.GetAfter(), pushed.UTC().Format(time.RFC3339), int(MaxPushAge.Hours()/24), e.GetRef()), nil
}

// pullRequestRun fills in a pull request's run and returns the commit to
// build. Whether it comes from a fork, who opened it, and its head commit
// are read from the pull request as GitHub reports it to the App now, not
// from the payload: a fork's run is untrusted (no secrets, its own cache
// scope) and waits for approval if its author has none in the project yet.
func (w *Worker) pullRequestRun(ctx context.Context, gh *github.Client, repo store.Repository, owner, name string,
	number int, nr *store.NewRun) (string, error) {
	pr, _, err := gh.PullRequests.Get(ctx, owner, name, number)
	if err != nil {
		return "", fmt.Errorf("read pull request #%d: %w", number, err)
	}
	if pr.GetBase().GetRepo().GetID() != repo.GitHubID {
		return "", domain.Errorf(domain.EInvalid, "pull request #%d is not based on %s", number, repo.FullName)
	}
	// A fork that was deleted has no head repository: still a fork.
	nr.Untrusted = pr.GetHead().GetRepo().GetID() != repo.GitHubID
	nr.GitRef = fmt.Sprintf("refs/pull/%d/head", number)
	nr.Scope, nr.BaseRef = nr.GitRef, "refs/heads/"+pr.GetBase().GetRef()
	nr.Trigger = fmt.Sprintf("github:pull_request #%d", number)
	if nr.Untrusted {
		nr.Trigger += " from fork " + pr.GetHead().GetRepo().GetFullName()
	}
	nr.Actor = fmt.Sprintf("github:%d", pr.GetUser().GetID())
	nr.HeadRef = pr.GetHead().GetRef()
	return pr.GetHead().GetSHA(), nil
}
