package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// The run pages: the list, a run, a job and its log, and what a writer
// does to them. Every store call passes the user, so a page shows and
// changes only what their memberships allow.

type runsPage struct {
	page
	Filter       store.RunFilter
	States       []string
	NextURL      string // the next page's link, with the filter (encoded here)
	Project      string
	Projects     []store.Project
	MoreProjects bool
	Runs         []store.Run
	Next         string
}

// pageOf reads the dashboard's ?cursor= (for runs also ?before=).
func pageOf(r *http.Request, name string) store.Page {
	return store.Page{Limit: 50, Cursor: r.URL.Query().Get(name)}
}

// Runs lists the runs the user may read, newest first, a page at a time.
func Runs(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	q := r.URL.Query()
	f := store.RunFilter{Project: q.Get("project"), Branch: q.Get("branch"), State: q.Get("state"), Trigger: q.Get("trigger")}
	filter := url.Values{}
	for k, v := range map[string]string{"project": f.Project, "branch": f.Branch, "state": f.State, "trigger": f.Trigger} {
		if v != "" {
			filter.Set(k, v)
		}
	}
	f.Page = pageOf(r, "before")
	runs, next, err := u.Store.ListRuns(r.Context(), user, f)
	if err != nil {
		return err
	}
	// The filter shows the first projects only; the Projects page has them all.
	projects, more, err := u.Store.ListProjects(r.Context(), user, store.Page{Limit: 20})
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "runs", runsPage{page: page{Title: "Runs", User: user}, Filter: f, NextURL: nextRuns(filter, next),
		States: []string{"PENDING", "RUNNING", "PASSED", "FAILED", "CANCELED", "ABORTED"}, Project: q.Get("project"),
		Projects: projects, MoreProjects: more != "", Runs: runs, Next: next})
	return nil
}

// nextRuns is the link to the runs after cursor, filtered as now.
func nextRuns(filter url.Values, cursor string) string {
	if cursor == "" {
		return ""
	}
	filter.Set("before", cursor)
	return "/?" + filter.Encode() // every value is encoded
}

type queuePage struct {
	page
	Jobs []store.QueuedJob
}

// Queue shows the queued jobs: what waits, how long, for which labels,
// and which runners could take each (the page people open when "CI is
// slow").
func Queue(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	jobs, err := u.Store.Queue(r.Context(), user)
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "queue", queuePage{page: page{Title: "Queue", User: user}, Jobs: jobs})
	return nil
}

type runPage struct {
	page
	Run      store.Run
	Stages   [][]store.JobInfo
	Terminal bool
	CanWrite bool
	// CanDecide: the run waits for approval and this user may decide.
	CanDecide bool
	Artifacts []store.ArtifactInfo
}

// canWrite reports whether user has the write role in a project.
func (u *UI) canWrite(ctx context.Context, user store.User, projectID string) bool {
	p, err := u.Store.GetProject(ctx, user, projectID)
	return err == nil && p.Role != store.RoleRead
}

// Run shows a run and its job graph, stage by stage.
func Run(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	run, err := u.Store.GetRunAs(r.Context(), user, r.PathValue("run_id"))
	if err != nil {
		return err
	}
	jobs, err := u.Store.RunJobs(r.Context(), run.ID)
	if err != nil {
		return err
	}
	arts, err := u.Store.RunArtifacts(r.Context(), user, run.ID)
	if err != nil {
		return err
	}
	write := u.canWrite(r.Context(), user, run.ProjectID)
	u.render(w, http.StatusOK, "run", runPage{page: page{Title: fmt.Sprintf("%s #%d", run.Project, run.Number), User: user},
		Run: run, Stages: stages(jobs), Terminal: store.IsTerminalRun(run.State), CanWrite: write, Artifacts: arts,
		CanDecide: write && run.Approval == store.ApprovalPending && !store.IsTerminalRun(run.State) && run.Actor != "user:"+user.ID})
	return nil
}

// stages groups jobs by their depth in the needs graph.
func stages(jobs []store.JobInfo) [][]store.JobInfo {
	byName := map[string]store.JobInfo{}
	for _, j := range jobs {
		byName[j.Name] = j
	}
	depth := map[string]int{}
	var depthOf func(string, int) int
	depthOf = func(name string, guard int) int {
		if d, ok := depth[name]; ok || guard > len(jobs) {
			return d
		}
		d := 0
		for _, n := range byName[name].Needs {
			d = max(d, depthOf(n, guard+1)+1)
		}
		depth[name] = d
		return d
	}
	var out [][]store.JobInfo
	for _, j := range jobs {
		d := depthOf(j.Name, 0)
		for len(out) <= d {
			out = append(out, nil)
		}
		out[d] = append(out[d], j)
	}
	for _, s := range out {
		sort.SliceStable(s, func(a, b int) bool { return s[a].Name < s[b].Name })
	}
	return out
}

type jobPage struct {
	page
	Run         store.Run
	Job         store.JobDetail
	Generation  int
	JobTerminal bool
	CanWrite    bool
	// Report is the attempt's test report summary (nil: none).
	Report *protocol.TestSummary
	// DurationChart is the job's duration over its last runs (SVG).
	DurationChart svg
}

// Job shows a job's attempts and follows its log.
func Job(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	run, err := u.Store.GetRunAs(r.Context(), user, r.PathValue("run_id"))
	if err != nil {
		return err
	}
	job, err := u.Store.GetJob(r.Context(), user, run.ID, r.PathValue("job_id"))
	if err != nil {
		return err
	}
	gen, err := strconv.Atoi(r.URL.Query().Get("generation"))
	if err != nil || gen < 0 || gen > job.Generation {
		gen = 0 // the current attempt
	}
	jp := jobPage{page: page{Title: job.Name, User: user}, Run: run, Job: job,
		Generation: gen, JobTerminal: domain.JobTerminal(job.State), CanWrite: u.canWrite(r.Context(), user, run.ProjectID)}
	sum, _, err := u.Store.ReportAs(r.Context(), user, run.ID, job.ID, gen)
	switch {
	case err == nil:
		jp.Report = &sum
	case domain.ErrorCode(err) != domain.ENotFound:
		return err
	}
	history, err := u.Store.JobHistory(r.Context(), user, run.ID, job.Name, 30)
	if err != nil {
		return err
	}
	jp.DurationChart = durationChart(history)
	u.render(w, http.StatusOK, "job", jp)
	return nil
}

// JobLog returns the log from the stored offset ?offset=, masked, for the
// dashboard's script, with the job's state, so it knows when to stop
// following; X-Next-Offset is the stored offset to continue from.
func JobLog(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	offset, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil {
		offset = 0
	}
	gen, _ := strconv.Atoi(r.URL.Query().Get("generation"))
	job, err := u.Store.GetJob(r.Context(), user, r.PathValue("run_id"), r.PathValue("job_id"))
	if err != nil {
		return err
	}
	// ?limit= keeps a read within one step's section.
	limit, err := strconv.ParseInt(r.URL.Query().Get("limit"), 10, 64)
	if err != nil || limit <= 0 || limit > 256<<10 {
		limit = 256 << 10
	}
	lw, err := u.Store.ReadLogAs(r.Context(), user, job.RunID, job.ID, gen, offset, limit)
	if err != nil {
		return err
	}
	secureHeaders(w)
	// Bytes, never HTML: the script inserts them as text.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Next-Offset", strconv.FormatInt(lw.NextOffset, 10))
	w.Header().Set("X-Job-State", job.State)
	_, _ = w.Write(lw.Data)
	return nil
}

// runPath is the dashboard path of the run in the request (and its job).
func runPath(r *http.Request) string {
	back := "/runs/" + url.PathEscape(r.PathValue("run_id"))
	if id := r.PathValue("job_id"); id != "" {
		back += "/jobs/" + url.PathEscape(id)
	}
	return back
}

// Cancel cancels a run or a job and goes back to its page.
func Cancel(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	if _, _, err := u.Store.Cancel(r.Context(), user, r.PathValue("run_id"), r.PathValue("job_id")); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(r), http.StatusSeeOther)
	return nil
}

// Retry makes a new run of a finished one and opens it.
func Retry(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	run, err := u.Store.Retry(r.Context(), user, r.PathValue("run_id"), "")
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
	return nil
}

// Approve lets a run from a first-time contributor start.
func Approve(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	if _, err := u.Store.Approve(r.Context(), user, r.PathValue("run_id")); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(r), http.StatusSeeOther)
	return nil
}

// Reject ends a run from a first-time contributor without running it.
func Reject(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	if _, err := u.Store.Reject(r.Context(), user, r.PathValue("run_id")); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(r), http.StatusSeeOther)
	return nil
}

type runnersPage struct {
	page
	Runners []store.RunnerInfo
	Next    string
}

// Runners lists runners, for global admins, who may revoke them.
func Runners(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	rs, next, err := u.Store.ListRunners(r.Context(), pageOf(r, "cursor"))
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "runners", runnersPage{page: page{Title: "Runners", User: user}, Runners: rs, Next: next})
	return nil
}

// RevokeRunner revokes a runner (global admins).
func RevokeRunner(u *UI, w http.ResponseWriter, r *http.Request, by store.User) error {
	if err := u.Store.RevokeRunnerAs(r.Context(), by, r.PathValue("runner_id")); err != nil {
		return err
	}
	http.Redirect(w, r, "/runners", http.StatusSeeOther)
	return nil
}
