package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testConcurrency: with real runners, a newer run of a concurrency group
// with cancel-in-progress cancels the running one (its runner hears it
// and stops the step) and runs once it has ended; a run in another group
// is not touched.
func testConcurrency(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		marker := filepath.Join(s.channel(t), "started")
		slow := "concurrency: {group: 'deploy-${{ github.workflow }}', cancel-in-progress: true}\njobs:\n" +
			"  deploy:\n    runs-on: linux\n    steps:\n      - run: touch " + marker + "; sleep 120\n"
		first, err := s.submit(writePipeline(t, slow), false)
		if err != nil {
			t.Fatal(err)
		}
		waitForFile(t, marker, "the first run's step never started")
		fast := strings.Replace(slow, "touch "+marker+"; sleep 120", "echo second", 1)
		second, err := s.submit(writePipeline(t, fast), false)
		if err != nil {
			t.Fatal(err)
		}
		v1 := s.waitRun(first, func(v runView) bool { return v.State == "CANCELED" }, 60*time.Second)
		v2 := s.waitRun(second, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)
		if j := v1.Jobs[0]; j.State != "CANCELED" {
			t.Fatalf("first run's job: %+v", j)
		}
		if log := s.log(second, v2.Jobs[0].ID); !strings.Contains(log, "second") {
			t.Fatalf("second run's log:\n%s", log)
		}
		testJobConcurrency(t, s)
	}
}

// testJobConcurrency: a job's group holds across runs: a newer run's
// deploy job, with cancel-in-progress, cancels the older run's deploy
// while its step runs (its build and the newer run's build are not
// touched), and runs once it has ended.
func testJobConcurrency(t *testing.T, s *stack) {
	marker := filepath.Join(s.channel(t), "deploying")
	slow := "jobs:\n  build:\n    runs-on: linux\n    steps: [{run: echo built}]\n" +
		"  deploy:\n    needs: build\n    runs-on: linux\n" +
		"    concurrency: {group: 'deploy-${{ github.workflow }}-${{ needs.build.result }}', cancel-in-progress: true}\n" +
		"    steps:\n      - run: touch " + marker + "; sleep 120\n"
	first, err := s.submit(writePipeline(t, slow), false)
	if err != nil {
		t.Fatal(err)
	}
	waitForFile(t, marker, "the first run's deploy never started")
	second, err := s.submit(writePipeline(t, strings.Replace(slow, "touch "+marker+"; sleep 120", "echo deployed", 1)), false)
	if err != nil {
		t.Fatal(err)
	}
	v1 := s.waitRun(first, func(v runView) bool { return v.State == "CANCELED" }, 60*time.Second)
	v2 := s.waitRun(second, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)
	for _, j := range v1.Jobs {
		if want := map[string]string{"build": "PASSED", "deploy": "CANCELED"}[j.Name]; j.State != want {
			t.Fatalf("first run's %s: %s, want %s", j.Name, j.State, want)
		}
	}
	for _, j := range v2.Jobs {
		if log := s.log(second, j.ID); j.Name == "deploy" && !strings.Contains(log, "deployed") {
			t.Fatalf("second run's deploy log:\n%s", log)
		}
	}
}

// waitForFile waits up to a minute for a step to make path, or fails
// with what.
func waitForFile(t *testing.T, path, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
