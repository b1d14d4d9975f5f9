package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/forgeci/forgeci/runner/client"
	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// leftAttempt makes what a runner killed mid-job leaves: the note, then
// the attempt's directory with its steps' environment.
func leftAttempt(t *testing.T, dir string, l domain.Lease) string {
	t.Helper()
	if err := noteAttempt(dir, l); err != nil {
		t.Fatal(err)
	}
	attempt := filepath.Join(dir, l.RunID, l.JobID, l.LeaseID)
	if err := os.MkdirAll(filepath.Join(attempt, "steps"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(attempt, "steps", "env-1"), []byte("TOKEN=secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return attempt
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestSweepRemovesWhatRunnersMade: a runner starting alone on its work
// directory removes the attempts dead runners noted and their probes'
// directories, and nothing else kept there, whatever a note says.
func TestSweepRemovesWhatRunnersMade(t *testing.T) {
	dir := t.TempDir()
	left := leftAttempt(t, dir, domain.Lease{RunID: "run-1", JobID: "job-1", LeaseID: "lease-1"})
	other := filepath.Join(dir, "run-1", "job-2", "lease-2") // not noted
	keep := filepath.Join(dir, "Documents", "thesis.tex")
	outside := filepath.Join(t.TempDir(), "victim")
	for _, p := range []string{other, filepath.Dir(keep), outside, filepath.Join(dir, "probe-123-0", "ws")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A note that does not name three plain components is dropped.
	rel, _ := filepath.Rel(dir, outside)
	if err := os.WriteFile(filepath.Join(dir, attemptNotes, "forged"), []byte(rel+"/x/y"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, n, refused, err := lockWorkDir(dir)
	if err != nil || refused != "" {
		t.Fatal(err, refused)
	}
	defer f.Close()
	if n != 1 || exists(left) || exists(filepath.Join(dir, "probe-123-0")) {
		t.Fatalf("removed %d; the attempt left: %v; the probe's: %v", n, exists(left), exists(filepath.Join(dir, "probe-123-0")))
	}
	if !exists(other) || !exists(keep) || !exists(outside) {
		t.Fatalf("removed what no note named: other attempt %v, a file kept there %v, outside %v", exists(other), exists(keep), exists(outside))
	}
	if notes, _ := os.ReadDir(filepath.Join(dir, attemptNotes)); len(notes) != 0 {
		t.Fatalf("notes left: %v", notes)
	}
}

// TestSweepSparesLiveRunners: while another runner uses the directory
// (it holds the lock), a starting runner removes nothing; the last to
// start after they have all gone does.
func TestSweepSparesLiveRunners(t *testing.T) {
	dir := t.TempDir()
	first, _, _, err := lockWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	live := leftAttempt(t, dir, domain.Lease{RunID: "run-1", JobID: "job-1", LeaseID: "lease-1"})
	second, n, _, err := lockWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || !exists(live) {
		t.Fatalf("a runner removed a live runner's attempt (%d)", n)
	}
	first.Close()
	second.Close()
	third, n, _, err := lockWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if n != 1 || exists(live) {
		t.Fatalf("the attempt of runners gone was not removed (%d)", n)
	}
}

// TestUnsafeIDsNameNoDirectory: a claim whose IDs are not plain path
// components (a control plane compromised, or a proxy in between) fails
// before any directory is made, and its clean-up removes nothing: the
// root runner would have removed a directory outside its own.
func TestUnsafeIDsNameNoDirectory(t *testing.T) {
	tmp := t.TempDir()
	victim := filepath.Join(tmp, "victim", "data")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	iso, err := isolate.New(isolate.Config{Mode: isolate.None}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iso.Close)
	a := New(Config{Client: client.New("http://127.0.0.1:1", "runner-secret"), Isolation: iso, WorkDir: filepath.Join(tmp, "work"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, l := range []domain.Lease{
		{RunID: "..", JobID: "victim", LeaseID: "data"},
		{RunID: "run", JobID: "../../victim", LeaseID: "data"},
		{RunID: "run", JobID: "job", LeaseID: ""},
		{RunID: "run", JobID: "job", LeaseID: ".forgeci-attempts"},
		{RunID: "run\n", JobID: "job", LeaseID: "lease"},
		{RunID: "id-token", JobID: "job", LeaseID: "lease"}, // the runner's own
		{RunID: "probe-1-0", JobID: "job", LeaseID: "lease"},
	} {
		j, done := a.newJob(&protocol.Claim{Lease: l, Job: domain.ClaimedJob{Name: "j", TimeoutSeconds: 60}})
		err := j.prepare(0)
		j.cleanUp(a.cfg.Log)
		done()
		if err == nil || !strings.Contains(err.Error(), "cannot name a directory") {
			t.Errorf("%+v: %v", l, err)
		}
		if !exists(victim) {
			t.Fatalf("%+v: the clean-up removed %s", l, victim)
		}
	}
}

// TestSweepStaysInside: a note naming a path through a symlink out of
// the work directory removes nothing out there, and a note that is a
// FIFO does not hang the start; in a directory others may write, nothing
// is removed at all.
func TestSweepStaysInside(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "projects", "thesis"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, attemptNotes), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, attemptNotes, "planted"), []byte("a/projects/thesis"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, attemptNotes, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, n, _, err := lockWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n != 0 || !exists(filepath.Join(outside, "projects", "thesis")) {
		t.Fatalf("the sweep followed a symlink out of the work directory (%d)", n)
	}

	open := t.TempDir()
	left := leftAttempt(t, open, domain.Lease{RunID: "run-1", JobID: "job-1", LeaseID: "lease-1"})
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	f, n, refused, err := lockWorkDir(open)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n != 0 || !exists(left) || !strings.Contains(refused, "not the runner's alone") {
		t.Fatalf("swept %d in a directory others may write (%q)", n, refused)
	}
}
