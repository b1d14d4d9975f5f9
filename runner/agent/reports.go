package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/junit"
	"github.com/forgeci/forgeci/shared/protocol"
)

// Test reports (reports: junit): read when the steps end, passed or
// failed (a failing test run is when they matter), from the workspace
// the steps left, which is hostile: files are opened inside it only
// (os.Root: no link leads out), must be regular files of the job's user
// (a hard link to the runner's files is not), and are parsed bounded
// (package junit). The files go up as the artifact test-reports; their
// summary through the report route.

// maxReportFiles bounds the files one job's patterns may match, and
// maxReportBytes what is read of them all together.
const (
	maxReportFiles = 500
	maxReportBytes = 64 << 20
)

// sendReports reads, uploads and sums up the job's test reports. A
// problem is said in the log and does not change the job's outcome.
func (j *job) sendReports() {
	spec := j.claim.Job.Reports
	if spec == nil || j.stopped() != nil {
		return
	}
	// Nothing the steps started may still be writing the reports.
	if err := j.box.Kill(); err != nil {
		fmt.Fprintf(j.logs, "==> test reports not read: the job's processes could not be stopped: %v\n", err)
		return
	}
	files, err := j.reportFiles(spec.JUnit)
	if err != nil {
		fmt.Fprintf(j.logs, "==> test reports: %v\n", err)
	}
	if len(files) == 0 {
		fmt.Fprintf(j.logs, "==> no test report matched %s\n", strings.Join(spec.JUnit, ", "))
		return
	}
	sum, parsed := j.summarize(files)
	fitSummary(&sum)
	if len(parsed) > 0 {
		// Only what was read as a report, so within its bounds.
		if err := j.uploadArtifact(domain.ArtifactSpec{Name: domain.ReportArtifact, Paths: parsed}); err != nil {
			fmt.Fprintf(j.logs, "==> test report files not uploaded: %v\n", err)
		}
	}
	if err := j.lease.SendReport(j.ctx, sum); err != nil {
		fmt.Fprintf(j.logs, "==> test report summary not sent: %v\n", err)
		return
	}
	fmt.Fprintf(j.logs, "==> tests: %d passed, %d failed, %d errored, %d skipped (%d report files)\n",
		sum.Passed, sum.Failed, sum.Errored, sum.Skipped, sum.Files)
}

// Bounds of the walk for report files: a step can make a tree of any
// depth or breadth, and the runner (root, outside the job's cgroup) must
// neither hang nor run out of memory on it.
const (
	maxWalkEntries = 200_000
	maxWalkDepth   = 32
	maxWalkTime    = 30 * time.Second
)

var errWalkBudget = errors.New("walk budget spent")

// reportFiles are the workspace's regular files matching the patterns,
// sorted, found without following links, within the walk's bounds
// (directories are read a slice at a time, so a huge one costs no more).
func (j *job) reportFiles(patterns []string) ([]string, error) {
	root, err := os.OpenRoot(j.ws)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	w := &reportWalk{j: j, root: root, patterns: patterns, deadline: time.Now().Add(maxWalkTime)}
	err = w.dir(".", 0)
	if err != nil && !errors.Is(err, errWalkBudget) {
		return nil, err
	}
	slices.Sort(w.files)
	return w.files, w.note
}

// reportWalk is one walk of the workspace for report files.
type reportWalk struct {
	j        *job
	root     *os.Root
	patterns []string
	deadline time.Time
	seen     int
	files    []string
	note     error
}

// dir walks directory path (depth deep), its entries a slice at a time.
func (w *reportWalk) dir(path string, depth int) error {
	if depth > maxWalkDepth {
		return nil
	}
	d, err := w.root.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil // unreadable, or not a directory any more: no reports
	}
	defer d.Close()
	for {
		entries, err := d.ReadDir(256)
		for _, e := range entries {
			if err := w.entry(path, e, depth); err != nil {
				return err
			}
		}
		if err != nil {
			return nil // io.EOF, or unreadable
		}
	}
}

// entry looks at one entry of directory dir.
func (w *reportWalk) entry(dir string, e fs.DirEntry, depth int) error {
	w.seen++
	switch {
	case w.j.ctx.Err() != nil:
		return w.j.ctx.Err()
	case w.seen > maxWalkEntries || time.Now().After(w.deadline):
		w.note = fmt.Errorf("the workspace holds more than the %d entries (or %s) looked through for reports; the rest were not", maxWalkEntries, maxWalkTime)
		return errWalkBudget
	}
	path := e.Name()
	if dir != "." {
		path = dir + "/" + e.Name()
	}
	if e.IsDir() {
		return w.dir(path, depth+1)
	}
	if !e.Type().IsRegular() {
		return nil
	}
	for _, pat := range w.patterns {
		if ok, _ := doublestar.Match(pat, path); ok {
			if len(w.files) == maxReportFiles {
				w.note = fmt.Errorf("the patterns match over %d files; the first %d are read", maxReportFiles, maxReportFiles)
				return errWalkBudget
			}
			w.files = append(w.files, path)
			return nil
		}
	}
	return nil
}

// summarize parses each file and adds up what they say; a file that
// cannot be read or parsed is said in the log and left out. It returns
// the files it read.
func (j *job) summarize(files []string) (protocol.TestSummary, []string) {
	sum := protocol.TestSummary{Failures: []protocol.TestFailure{}}
	var parsed []string
	root, err := os.OpenRoot(j.ws)
	if err != nil {
		fmt.Fprintf(j.logs, "==> test reports: %v\n", err)
		return sum, nil
	}
	defer root.Close()
	read := int64(0)
	for _, name := range files {
		if read >= maxReportBytes {
			fmt.Fprintf(j.logs, "==> test reports: %d bytes read, the most a job's are; %q and the rest are left out\n", read, name)
			break
		}
		rep, size, err := j.parseReport(root, name)
		read += size
		if err != nil {
			fmt.Fprintf(j.logs, "==> test report %q not read: %v\n", name, err)
			continue
		}
		parsed = append(parsed, name)
		sum.Files++
		sum.Tests += rep.Tests
		sum.Passed += rep.Passed
		sum.Failed += rep.Failed
		sum.Errored += rep.Errored
		sum.Skipped += rep.Skipped
		sum.Seconds = min(sum.Seconds+rep.Seconds, 1e9)
		sum.Truncated = sum.Truncated || rep.Truncated
		for _, f := range rep.Failures {
			if len(sum.Failures) == protocol.MaxReportFailures {
				sum.Truncated = true
				break
			}
			sum.Failures = append(sum.Failures, j.failure(f))
		}
	}
	return sum, parsed
}

// fitSummary drops failures from the end (saying so) until the summary's
// request fits well within the route's body limit: text full of < and &
// grows six times in JSON.
func fitSummary(sum *protocol.TestSummary) {
	for len(sum.Failures) > 0 {
		b, _ := json.Marshal(sum) // strings, numbers and bools
		if len(b) <= protocol.MaxReportBody*3/4 {
			return
		}
		sum.Failures = sum.Failures[:len(sum.Failures)-1]
		sum.Truncated = true
	}
}

// parseReport opens name inside root (no link out; non-blocking, so a
// FIFO put there meanwhile cannot hold the runner), as a regular file of
// the job's user, and parses it; it returns the file's size too.
func (j *job) parseReport(root *os.Root, name string) (*junit.Report, int64, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, errors.New("not a regular file")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && j.box.Owner() >= 0 && int(st.Uid) != j.box.Owner() {
		return nil, 0, fmt.Errorf("it belongs to user %d, not the job's: a hard link to a file outside the job is not read", st.Uid)
	}
	rep, err := junit.Parse(f)
	return rep, min(fi.Size(), junit.MaxReportBytes), err
}

// failure is a parsed failure as the protocol bounds it, masked as the
// log is.
func (j *job) failure(f junit.Failure) protocol.TestFailure {
	name := f.Name
	if name == "" {
		name = "(unnamed)"
	}
	m := j.logs.maskSet()
	// The parser cut long text (ending it with …): a secret cut there
	// would not be recognised, so what could be its beginning goes first.
	f.Message, f.Text = dropCutTail(f.Message, m.Longest()), dropCutTail(f.Text, m.Longest())
	// A report written with absolute paths names the workspace's files
	// as they are here: GitHub's annotations need them as in the
	// repository.
	if rel, err := filepath.Rel(j.ws, f.File); err == nil && filepath.IsAbs(f.File) && filepath.IsLocal(rel) {
		f.File = filepath.ToSlash(rel)
	}
	return protocol.TestFailure{Suite: cut(m.String(f.Suite), 1024), Class: cut(m.String(f.Class), 1024), Name: cut(m.String(name), 1024),
		Kind: f.Kind, Message: cut(m.String(f.Message), 2048), Text: cut(m.String(f.Text), 2048), File: cut(m.String(f.File), 1024),
		Line: min(max(f.Line, 0), 10_000_000)}
}

// dropCutTail removes, from text the parser cut (it ends in …), the
// longest bytes before the cut that could begin a secret (n-1).
func dropCutTail(s string, n int) string {
	body, wasCut := strings.CutSuffix(s, "…")
	if !wasCut || n <= 1 {
		return s
	}
	return cut(body, max(len(body)-(n-1), 0)) + "…"
}

// cut shortens s to at most n bytes of valid UTF-8 without NUL (what the
// protocol takes, whatever a report or a step's name held): the server
// refuses a string holding NUL, and the whole report with it.
// domain.Truncate makes text so.
func cut(s string, n int) string { return domain.Truncate(s, n) }
