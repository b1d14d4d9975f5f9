package chaos_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/chaos"
	"github.com/forgeci/forgeci/shared/cas/castest"
)

var (
	buildOnce sync.Once
	runnerBin string
	buildErr  error
)

// runner builds forgeci-runner once for the tests of this package.
func runner(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "forgeci-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		runnerBin = filepath.Join(dir, "forgeci-runner")
		if out, err := exec.Command("go", "build", "-o", runnerBin, "../runner/cmd/forgeci-runner").CombinedOutput(); err != nil {
			buildErr = err
			t.Logf("%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build forgeci-runner: %v", buildErr)
	}
	return runnerBin
}

// TestChaosShort is the short chaos run `make test` includes: real runner
// processes, real PostgreSQL and S3, every kind of fault, then the checker.
// `make chaos` runs the same for longer (cmd/forgeci-chaos).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos")
	}
	dir := t.TempDir()
	rep, err := chaos.Run(context.Background(), chaos.Config{
		Dir: dir, Duration: 35 * time.Second, Settle: 60 * time.Second,
		Runners: 3, Concurrency: 2, LeaseTTL: 4 * time.Second, SweepEvery: 500 * time.Millisecond, InFlight: 5,
		S3: castest.Config(t), Faults: chaos.DefaultFaults(), RunnerBin: runner(t), Progress: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.String())
	if !rep.OK() {
		keep(t, dir)
		t.Fatalf("%d violations", len(rep.Violations))
	}
	if rep.JobStates["PASSED"] == 0 || rep.StaleAttempted == 0 || rep.Replayed == 0 {
		keep(t, dir)
		t.Fatalf("the run proved too little: %d jobs passed, %d stale requests (%d replayed)", rep.JobStates["PASSED"], rep.StaleAttempted, rep.Replayed)
	}
}

// TestClockSkew: with the database's clock five minutes ahead of every
// other clock here, and then five minutes behind, runners behave: leases
// are kept alive by heartbeats and lost only when a runner really stops,
// because no lease decision reads a clock other than the database's. (A Go
// runner's own clock cannot be moved by libfaketime, which Go's time calls
// bypass; moving the database's instead gives the runner the same view:
// the lease expiry it is handed is five minutes off its own clock.) Each
// run SIGSTOPs runners past the lease, stalls the sweeper so that expired
// leases stay RUNNING in the table for a while (only the database clock's
// expiry test then refuses a runner that comes back), and checks every
// invariant. A lease lost to a heartbeat sent or answered late, past the
// runner's own end of it, with no fault to explain it, is the load of the
// machine, once (maxLoadLosses).
func TestClockSkew(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos")
	}
	if _, err := chaos.FakeTimeLibrary(); err != nil {
		t.Skip(err)
	}
	for _, skew := range []struct {
		name   string
		offset time.Duration
	}{{"+5m", 5 * time.Minute}, {"-5m", -5 * time.Minute}} {
		t.Run("database clock "+skew.name, func(t *testing.T) {
			dir := t.TempDir()
			ttl := 4 * time.Second
			rep, err := chaos.Run(context.Background(), chaos.Config{
				Dir: dir, Duration: 14 * time.Second, Settle: 45 * time.Second,
				Runners: 2, Concurrency: 2, LeaseTTL: ttl, SweepEvery: 300 * time.Millisecond, InFlight: 3,
				S3: castest.Config(t), DBClock: skew.name, RunnerBin: runner(t), Progress: testWriter{t},
				Faults: chaos.Faults{Every: 4 * time.Second, Stop: 2, Stall: 1, StopFor: [2]time.Duration{ttl * 3 / 2, ttl * 2}},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + rep.String())
			if d := rep.ClockOffset - skew.offset; d < -5*time.Second || d > 5*time.Second {
				t.Fatalf("the database's clock is %s off, not %s: libfaketime did not take", rep.ClockOffset, skew.offset)
			}
			switch {
			case !rep.OK():
				keep(t, dir)
				t.Fatalf("%d violations", len(rep.Violations))
			case rep.LeaseLosses["unexplained"] > 0:
				keep(t, dir)
				t.Fatalf("%d leases were lost with no fault to explain it", rep.LeaseLosses["unexplained"])
			case rep.LoadLosses() > maxLoadLosses:
				// One such loss is the machine's load; more are the
				// heartbeat path's own slowness.
				keep(t, dir)
				t.Fatalf("%d leases were lost to heartbeats sent or answered late, no fault to explain it", rep.LoadLosses())
			case rep.JobStates["PASSED"] == 0 || rep.StopsPastLease == 0:
				keep(t, dir)
				t.Fatalf("the run proved too little: %d jobs passed, %d stops past the lease", rep.JobStates["PASSED"], rep.StopsPastLease)
			}
		})
	}
}

// maxLoadLosses is how many leases TestClockSkew may lose to a heartbeat
// sent or answered late with no fault to explain it: on two cores shared
// with the other packages' tests a runner or the control plane can stall
// past the 4 s lease's margin once.
const maxLoadLosses = 1

// keep copies the run's logs out of the test's temporary directory.
func keep(t *testing.T, dir string) {
	out := os.Getenv("FORGECI_CHAOS_KEEP")
	if out == "" {
		t.Logf("set FORGECI_CHAOS_KEEP=DIR to keep the run's logs")
		return
	}
	_ = os.CopyFS(filepath.Join(out, filepath.Base(dir)), os.DirFS(dir))
	t.Logf("logs kept in %s", out)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
