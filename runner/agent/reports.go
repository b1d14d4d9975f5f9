package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

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

var errTooManyReports = errors.New("too many report files")

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
	sum := j.summarize(files)
	if err := j.uploadArtifact(domain.ArtifactSpec{Name: domain.ReportArtifact, Paths: files}); err != nil {
		fmt.Fprintf(j.logs, "==> test report files not uploaded: %v\n", err)
	}
	if err := j.lease.SendReport(j.ctx, sum); err != nil {
		fmt.Fprintf(j.logs, "==> test report summary not sent: %v\n", err)
		return
	}
	fmt.Fprintf(j.logs, "==> tests: %d passed, %d failed, %d errored, %d skipped (%d report files)\n",
		sum.Passed, sum.Failed, sum.Errored, sum.Skipped, sum.Files)
}

// reportFiles are the workspace's files matching the patterns, sorted,
// not followed through links.
func (j *job) reportFiles(patterns []string) ([]string, error) {
	root, err := os.OpenRoot(j.ws)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	seen := map[string]bool{}
	var files []string
	for _, pat := range patterns {
		err := doublestar.GlobWalk(root.FS(), pat, func(path string, d fs.DirEntry) error {
			if d.Type().IsRegular() && !seen[path] {
				if len(files) == maxReportFiles {
					return errTooManyReports
				}
				seen[path] = true
				files = append(files, path)
			}
			return nil
		}, doublestar.WithNoFollow(), doublestar.WithFilesOnly())
		if errors.Is(err, errTooManyReports) {
			slices.Sort(files)
			return files, fmt.Errorf("the patterns match over %d files; the first %d are read", maxReportFiles, maxReportFiles)
		}
		if err != nil {
			return nil, fmt.Errorf("pattern %s: %w", pat, err)
		}
	}
	slices.Sort(files)
	return files, nil
}

// summarize parses each file and adds up what they say; a file that
// cannot be read or parsed is said in the log and left out.
func (j *job) summarize(files []string) protocol.TestSummary {
	sum := protocol.TestSummary{Failures: []protocol.TestFailure{}}
	root, err := os.OpenRoot(j.ws)
	if err != nil {
		fmt.Fprintf(j.logs, "==> test reports: %v\n", err)
		return sum
	}
	defer root.Close()
	read := int64(0)
	for _, name := range files {
		if read >= maxReportBytes {
			fmt.Fprintf(j.logs, "==> test reports: %d bytes read, the most a job's are; %s and the rest are left out\n", read, name)
			break
		}
		rep, size, err := j.parseReport(root, name)
		read += size
		if err != nil {
			fmt.Fprintf(j.logs, "==> test report %s not read: %v\n", name, err)
			continue
		}
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
	return sum
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
	m := j.logs.set
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

// cut shortens s to at most n bytes of valid UTF-8.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
