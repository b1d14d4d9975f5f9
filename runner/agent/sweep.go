package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/forgeci/forgeci/shared/domain"
)

// A runner killed mid-job (a crash, kill -9, the machine's power) leaves
// its attempts' directories behind: workspaces, the steps' environment
// files with the job's secrets, caches. The next runner on the work
// directory removes them before it claims anything. It removes only what
// a runner recorded making (a note per attempt under attemptNotes, synced
// before the attempt is made) and probes' directories, never whatever
// else someone keeps in the directory, and only while no other runner uses
// the directory: every runner holds a lock on the directory itself, shared,
// while it runs, and the one that gets it exclusively at its start is
// alone. It removes nothing in a directory others may write (a non-root
// runner's /tmp/forgeci-work made first by another user): a planted note
// or symlink would steer it.
const attemptNotes = ".forgeci-attempts"

// probeDir is the name of a directory isolate.Probe makes (probe-PID-SLOT).
var probeDir = regexp.MustCompile(`^probe-[0-9]+-[0-9]+$`)

// lockWorkDir locks the work directory, shared, for as long as the
// returned file stays open; first, if it can have it exclusively (no
// other runner is using the directory), it removes what dead runners
// left. It returns how many attempts it removed, and why it removed
// nothing when it should have.
func lockWorkDir(dir string) (f *os.File, swept int, refused string, err error) {
	if f, err = os.Open(dir); err != nil {
		return nil, 0, "", fmt.Errorf("the work directory's lock: %w", err)
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		if refused = ownedAlone(f); refused == "" {
			swept = sweepAttempts(dir)
		}
	}
	// Converting lets another starting runner in between, which finds
	// nothing of this one's to remove: it has made nothing yet.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, 0, "", fmt.Errorf("the work directory's lock: %w", err)
	}
	return f, swept, refused, nil
}

// ownedAlone says why the directory is not the runner's alone ("" if it is).
func ownedAlone(f *os.File) string {
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("the work directory is not the runner's alone (mode %v): what dead runners left there is not removed", fi.Mode().Perm())
	}
	return ""
}

// sweepAttempts removes the attempts the notes name, and the probes'
// directories. Every path is opened beneath dir, never through a symlink
// out of it.
func sweepAttempts(dir string) int {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0
	}
	defer root.Close()
	entries, _ := fs.ReadDir(root.FS(), attemptNotes)
	n := 0
	for _, e := range entries {
		note := attemptNotes + "/" + e.Name()
		parts, ok := readNote(root, note)
		if ok {
			attempt := strings.Join(parts, "/")
			if root.RemoveAll(attempt) != nil {
				continue // the note stays, for the next start
			}
			_ = root.Remove(parts[0] + "/" + parts[1])
			_ = root.Remove(parts[0])
			n++
		}
		_ = root.Remove(note)
	}
	entries, _ = fs.ReadDir(root.FS(), ".")
	for _, e := range entries {
		if e.IsDir() && probeDir.MatchString(e.Name()) {
			_ = root.RemoveAll(e.Name())
		}
	}
	return n
}

// readNote reads the attempt a note names: three safe IDs.
func readNote(root *os.Root, note string) ([]string, bool) {
	if fi, err := root.Lstat(note); err != nil || !fi.Mode().IsRegular() || fi.Size() > 1024 {
		return nil, false
	}
	f, err := root.OpenFile(note, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1024))
	parts := strings.Split(string(b), "/")
	return parts, err == nil && len(parts) == 3 && safeIDs(parts...) == nil
}

// noteAttempt records, on disk before it returns, that the attempt's
// directory run/job/lease is about to be made; forgetAttempt, that it is
// gone.
func noteAttempt(dir string, l domain.Lease) error {
	notes := filepath.Join(dir, attemptNotes)
	if err := os.Mkdir(notes, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	rel := attemptPath(l)
	f, err := os.OpenFile(filepath.Join(notes, noteName(rel)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(rel)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d, err := os.Open(notes)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func forgetAttempt(dir string, l domain.Lease) {
	_ = os.Remove(filepath.Join(dir, attemptNotes, noteName(attemptPath(l))))
}

// attemptPath is an attempt's directory relative to the work directory, as
// a note holds it.
func attemptPath(l domain.Lease) string { return l.RunID + "/" + l.JobID + "/" + l.LeaseID }

func noteName(rel string) string {
	sum := sha256.Sum256([]byte(rel))
	return hex.EncodeToString(sum[:16])
}

// safeIDs refuses IDs that are not one plain path component each: the
// protocol's IDs are opaque strings, and an attempt's directory is named
// by its run's, job's and lease's, which the root runner later removes;
// nor the names of the runner's own (id-token, probes', dot-files).
func safeIDs(ids ...string) error {
	for _, id := range ids {
		if id == "" || len(id) > 128 || strings.HasPrefix(id, ".") || id == "id-token" || probeDir.MatchString(id) ||
			strings.ContainsFunc(id, func(r rune) bool { return r == '/' || r == '\\' || r < ' ' || r == 0x7f }) {
			return fmt.Errorf("%q cannot name a directory", id)
		}
	}
	return nil
}
