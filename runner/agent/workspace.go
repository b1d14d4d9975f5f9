package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/forgeci/forgeci/runner/isolate"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// prepare makes the attempt's isolated directories and fills the
// workspace with the verified source, the cache and the artifacts the job
// needs, then hands it to the slot's user.
func (j *job) prepare(slot int) error {
	c, l := j.claim, j.claim.Lease
	var lim isolate.Limits
	if jl := c.Job.Limits; jl != nil {
		lim = isolate.Limits{MemoryBytes: jl.MemoryBytes, Pids: jl.Processes, CPUs: jl.CPUs}
		if !j.a.cfg.Isolation.Enforced() {
			fmt.Fprintf(j.logs, "==> the job's limits are not enforced: this runner makes no cgroups (it does not run as root)\n")
		}
	}
	if err := safeIDs(l.RunID, l.JobID, l.LeaseID); err != nil {
		return fmt.Errorf("the claim's IDs, no step was run: %w", err)
	}
	// Noted first, so that a runner killed from here on leaves nothing a
	// later one would not remove.
	if err := noteAttempt(j.a.cfg.WorkDir, l); err != nil {
		return fmt.Errorf("the runner could not note the attempt, no step was run: %w", err)
	}
	box, err := j.a.cfg.Isolation.NewBox(slot, filepath.Join(j.a.cfg.WorkDir, l.RunID, l.JobID, l.LeaseID), lim)
	if err != nil {
		return fmt.Errorf("the runner could not isolate the job, no step was run: %w", err)
	}
	j.box, j.ws = box, box.Workspace()
	if err := j.fetchSource(); err != nil {
		return fmt.Errorf("source could not be verified, no step was run: %w", err)
	}
	// After the source: a cache key may hash its files.
	if err := j.resolveJob(); err != nil {
		return fmt.Errorf("the job's expressions, no step was run: %w", err)
	}
	if c.Job.Cache != nil {
		if err := j.restoreCache(); err != nil {
			fmt.Fprintf(j.logs, "==> cache not restored: %v\n", err)
		}
	}
	for _, na := range c.Job.NeedArtifacts {
		b, err := j.lease.FetchArtifact(j.ctx, na.Job, na.Name)
		if err == nil {
			err = j.unpackInto(b.URL, b.Digest, b.Size, "")
		}
		if err != nil {
			return fmt.Errorf("artifact %s of %s could not be fetched: %w", na.Name, na.Job, err)
		}
		fmt.Fprintf(j.logs, "==> artifact %s from %s\n", na.Name, na.Job)
	}
	// Each tree was checked alone; links of two together can lead out.
	if err := snapshot.CheckLinks(j.ws); err != nil {
		return fmt.Errorf("the workspace's symlinks lead outside it once the cache and artifacts are merged in, no step was run: %w", err)
	}
	if err := j.box.HandOver(); err != nil {
		return fmt.Errorf("the workspace could not be handed to the job's user: %w", err)
	}
	return nil
}

// cleanUp kills whatever the job left running and deletes this lease's
// attempt directory, then the job's and the run's directories only if
// nothing else is using them: the next attempt of the same job may already
// be running here (a retry claimed by another slot the moment this one
// completed), and so may other jobs of the run.
func (j *job) cleanUp(log *slog.Logger) bool {
	l := j.claim.Lease
	jobDir := filepath.Join(j.a.cfg.WorkDir, l.RunID, l.JobID)
	ok := true
	if j.box != nil {
		if err := j.box.Close(); err != nil {
			log.Error("job not cleaned up", "err", err)
			ok = false
		}
	}
	if j.box == nil || safeIDs(l.RunID, l.JobID, l.LeaseID) != nil {
		// Nothing was made: the directory may be another slot's (a claim
		// naming a lease already running here), not this one's to remove.
		return ok
	}
	if err := os.RemoveAll(filepath.Join(jobDir, l.LeaseID)); err == nil {
		forgetAttempt(j.a.cfg.WorkDir, l)
	}
	isolate.RemoveParents(filepath.Join(jobDir, l.LeaseID))
	return ok
}
