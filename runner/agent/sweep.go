package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/domain"
)

// A runner killed mid-job (a crash, kill -9, the machine's power) leaves
// its attempts' directories behind: workspaces, the steps' environment
// files with the job's secrets, caches. The next runner on the work
// directory removes them before it claims anything. It removes only what
// a runner recorded making (a note per attempt under attemptNotes), never
// whatever else someone keeps in the directory, and only while no other
// runner uses the directory: every runner holds lockName shared while it
// runs, and the one that gets it exclusively at its start is alone.
const (
	lockName     = ".forgeci-runner.lock"
	attemptNotes = ".forgeci-attempts"
)

// probeDir is the name of a directory isolate.Probe makes (probe-PID-SLOT).
var probeDir = regexp.MustCompile(`^probe-[0-9]+-[0-9]+$`)

// lockWorkDir takes the work directory's lock, shared, for as long as the
// returned file stays open; first, if it can have it exclusively (no
// other runner is using the directory), it removes what dead runners
// left. It returns how many attempts it removed.
func lockWorkDir(dir string) (*os.File, int, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("the work directory's lock: %w", err)
	}
	n := 0
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		n = sweepAttempts(dir)
	}
	// Converting lets another starting runner in between, which finds
	// nothing of this one's to remove: it has made nothing yet.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("the work directory's lock: %w", err)
	}
	return f, n, nil
}

// sweepAttempts removes the attempts the notes name, and the probes' directories.
func sweepAttempts(dir string) int {
	notes := filepath.Join(dir, attemptNotes)
	entries, _ := os.ReadDir(notes)
	n := 0
	for _, e := range entries {
		note := filepath.Join(notes, e.Name())
		rel, err := os.ReadFile(note)
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		if parts := strings.Split(string(rel), "/"); len(parts) == 3 && safeIDs(parts...) == nil {
			attempt := filepath.Join(dir, parts[0], parts[1], parts[2])
			if os.RemoveAll(attempt) != nil {
				continue // the note stays, for the next start
			}
			isolate.RemoveParents(attempt)
			n++
		}
		_ = os.Remove(note)
	}
	entries, _ = os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() && probeDir.MatchString(e.Name()) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return n
}

// noteAttempt records that the attempt's directory run/job/lease is about
// to be made; forgetAttempt, that it is gone.
func noteAttempt(dir string, l domain.Lease) error {
	notes := filepath.Join(dir, attemptNotes)
	if err := os.Mkdir(notes, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	rel := l.RunID + "/" + l.JobID + "/" + l.LeaseID
	return os.WriteFile(filepath.Join(notes, noteName(rel)), []byte(rel), 0o600)
}

func forgetAttempt(dir string, l domain.Lease) {
	_ = os.Remove(filepath.Join(dir, attemptNotes, noteName(l.RunID+"/"+l.JobID+"/"+l.LeaseID)))
}

func noteName(rel string) string {
	sum := sha256.Sum256([]byte(rel))
	return hex.EncodeToString(sum[:16])
}

// safeIDs refuses IDs that are not one plain path component each: the
// protocol's IDs are opaque strings, and an attempt's directory is named
// by its run's, job's and lease's, which the root runner later removes.
func safeIDs(ids ...string) error {
	for _, id := range ids {
		if id == "" || id == "." || id == ".." || len(id) > 128 || strings.HasPrefix(id, ".") ||
			strings.ContainsFunc(id, func(r rune) bool { return r == '/' || r == '\\' || r < ' ' || r == 0x7f }) {
			return fmt.Errorf("%q cannot name a directory", id)
		}
	}
	return nil
}
