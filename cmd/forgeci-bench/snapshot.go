package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/shared/snapshot"
)

// benchSnapshot: snapshot+compress+hash of the Go source tree beside
// `tar | zstd -3` of the same tree, and verify+extract (blob digest, bounded
// extraction, manifest recomputed from disk) beside `zstd -d | tar x`.
// Figures are MB/s of file content.
func benchSnapshot(ctx context.Context, _ string, rounds int) ([]row, error) {
	tree, err := benchTree()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "forgeci-bench-snap-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	var contentBytes int64
	_ = filepath.Walk(tree, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			contentBytes += fi.Size()
		}
		return nil
	})
	mb := float64(contentBytes) / 1e6
	blob := filepath.Join(work, "blob.tar.zst")
	var res *snapshot.Result
	ours := func() (time.Duration, error) {
		start := time.Now()
		t, err := snapshot.DirTree(tree)
		if err != nil {
			return 0, err
		}
		f, err := os.Create(blob)
		if err != nil {
			return 0, err
		}
		res, err = snapshot.Write(f, t)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return time.Since(start), err
	}
	theirs := func() (time.Duration, error) {
		start := time.Now()
		cmd := exec.Command("bash", "-c", `tar -cf - -C "$1" . | zstd -3 -T1 -q -f -o "$2"`, "bash", tree, filepath.Join(work, "base.tar.zst"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("tar | zstd: %v %s", err, out)
		}
		return time.Since(start), nil
	}
	snapOurs, snapBase, err := alternate(rounds, ours, theirs)
	if err != nil {
		return nil, err
	}
	// Extraction is timed twice: into the work directory (a disk, where a
	// runner's workspace is) and into /dev/shm (memory). On a disk the
	// file system's own cost is most of both times; in memory what is left
	// is the CPU, where verifying the blob and reading the tree back to
	// recompute its manifest, which tar does not do, show.
	exOurs, exBase, err := extractIn(work, blob, res, rounds)
	if err != nil {
		return nil, err
	}
	rows := []row{
		{name: fmt.Sprintf("snapshot+zstd+hash (%.0f MB Go tree)", mb), figure: mb / snapOurs.Seconds(), baseline: mb / snapBase.Seconds(),
			unit: "MB/s", higherIsBetter: true, goal: 0.8, baselineName: "tar | zstd -3"},
		{name: "verify+extract+manifest, disk", figure: mb / exOurs.Seconds(), baseline: mb / exBase.Seconds(),
			unit: "MB/s", higherIsBetter: true, goal: 0.7, baselineName: "zstd -d | tar x"},
	}
	if shm, err := os.MkdirTemp("/dev/shm", "forgeci-bench-snap-"); err == nil {
		defer os.RemoveAll(shm)
		exOurs, exBase, err := extractIn(shm, blob, res, rounds)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row{name: "verify+extract+manifest, memory", figure: mb / exOurs.Seconds(), baseline: mb / exBase.Seconds(),
			unit: "MB/s", higherIsBetter: true, baselineName: "zstd -d | tar x"})
	}
	return rows, nil
}

// benchTree is the tree snapshotted: $FORGECI_BENCH_TREE, or Go's source.
func benchTree() (string, error) {
	for _, tool := range []string{"tar", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s is needed for the baseline (make deps installs it)", tool)
		}
	}
	if tree := os.Getenv("FORGECI_BENCH_TREE"); tree != "" {
		return tree, nil
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(goroot)), "src"), nil
}

// extractIn times verifying and extracting blob into fresh directories
// under base, beside zstd -d | tar x of the same blob.
func extractIn(base, blob string, res *snapshot.Result, rounds int) (ours, theirs time.Duration, err error) {
	n := 0
	// inFreshDir times fn extracting into a new empty directory.
	inFreshDir := func(fn func(dest string) error) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			n++
			dest := filepath.Join(base, fmt.Sprintf("x%d", n))
			if err := os.Mkdir(dest, 0o755); err != nil {
				return 0, err
			}
			defer os.RemoveAll(dest)
			start := time.Now()
			err := fn(dest)
			return time.Since(start), err
		}
	}
	extractOurs := inFreshDir(func(dest string) error {
		if err := snapshot.VerifyFile(blob, res.BlobDigest, res.Size); err != nil {
			return err
		}
		_, err := snapshot.ExtractVerified(blob, dest, res.ManifestDigest, snapshot.Limits{})
		return err
	})
	extractBase := inFreshDir(func(dest string) error {
		out, err := exec.Command("bash", "-c", `zstd -d -q -c "$1" | tar -xf - -C "$2"`, "bash", blob, dest).CombinedOutput()
		if err != nil {
			return fmt.Errorf("zstd -d | tar x: %v %s", err, out)
		}
		return nil
	})
	return alternate(rounds, extractOurs, extractBase)
}

// alternate runs a and b in turns for rounds, swapping which goes first,
// and returns their medians. One untimed turn each comes first: on a
// virtual machine the first pass over fresh memory or disk blocks was up
// to ten times slower than the next, whichever tool made it.
func alternate(rounds int, a, b func() (time.Duration, error)) (time.Duration, time.Duration, error) {
	fns := [2]func() (time.Duration, error){a, b}
	for _, fn := range fns {
		if _, err := fn(); err != nil {
			return 0, 0, err
		}
	}
	var times [2][]float64
	for i := range rounds {
		for k := range 2 {
			which := (i + k) % 2
			// The kernel writes the previous turn's files back on its own
			// schedule; flushing them first keeps that write-back out of
			// whichever turn happens to run when it fires.
			syscall.Sync()
			d, err := fns[which]()
			if err != nil {
				return 0, 0, err
			}
			times[which] = append(times[which], d.Seconds())
		}
	}
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	return sec(median(times[0])), sec(median(times[1])), nil
}
