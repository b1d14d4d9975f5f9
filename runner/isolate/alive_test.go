package isolate

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestRunnerAlive: a runner's group is kept only while its PID is a
// process of root's; a job's process that came to hold the PID does not
// keep it.
func TestRunnerAlive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runners run as root, and so does CI")
	}
	if !runnerAlive(os.Getpid()) {
		t.Fatal("this process, root's, is not seen alive")
	}
	if runnerAlive(1 << 30) {
		t.Fatal("a PID no process holds is seen alive")
	}
	other := exec.Command("sleep", "30")
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if runnerAlive(other.Process.Pid) {
		t.Fatal("a process of another user holding the PID is seen as the runner")
	}
	// Root's process of another program may be another runner (a test's
	// binary, an upgrade's): its group is kept.
	root := exec.Command("sleep", "30")
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Process.Kill(); _ = root.Wait() }()
	if !runnerAlive(root.Process.Pid) {
		t.Fatal("root's process of another program is not seen alive")
	}
}
