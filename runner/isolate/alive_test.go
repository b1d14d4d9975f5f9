package isolate

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestRunnerAlive: a runner's group is kept only while its PID is a
// process of root's, the one that started when the group's name says; a
// job's process, or another of root's, that came to hold the PID does
// not keep it.
func TestRunnerAlive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runners run as root, and so does CI")
	}
	if !runnerAlive(os.Getpid(), -1) {
		t.Fatal("this process, root's, is not seen alive")
	}
	if runnerAlive(1<<30, -1) {
		t.Fatal("a PID no process holds is seen alive")
	}
	other := exec.Command("sleep", "30")
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if runnerAlive(other.Process.Pid, -1) {
		t.Fatal("a process of another user holding the PID is seen as the runner")
	}
	// Root's process of another program may be another runner (a test's
	// binary, an upgrade's): its group is kept.
	root := exec.Command("sleep", "30")
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Process.Kill(); _ = root.Wait() }()
	if !runnerAlive(root.Process.Pid, -1) {
		t.Fatal("root's process of another program is not seen alive")
	}
	// A group's name says which process made it: a process of root's that
	// took the PID later (a kernel thread, a daemon's worker) is not it.
	_, ticks, ok := runnerOfGroup(RunnerGroup(root.Process.Pid))
	if !ok || ticks < 0 || !runnerAlive(root.Process.Pid, ticks) {
		t.Fatalf("the process that made group %s is not seen alive", RunnerGroup(root.Process.Pid))
	}
	if runnerAlive(root.Process.Pid, ticks-1) {
		t.Fatal("root's process that took the PID of a runner started earlier is seen as that runner")
	}
}
