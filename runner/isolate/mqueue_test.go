package isolate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostMqueue gives the machine a POSIX message queue filesystem at
// /dev/mqueue, as systemd mounts it, for the test's length.
func hostMqueue(t *testing.T) {
	t.Helper()
	if out, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(out), " /dev/mqueue ") {
		return
	}
	// The directory stays after the test (as on hosts with systemd):
	// removed, it would vanish under the steps of other packages' runners.
	if err := os.Mkdir("/dev/mqueue", 0o1777); err != nil && !os.IsExist(err) {
		t.Skipf("no /dev/mqueue to mount on: %v", err)
	}
	if out, err := exec.Command("mount", "-t", "mqueue", "mqueue", "/dev/mqueue").CombinedOutput(); err != nil {
		t.Skipf("this kernel mounts no mqueue: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "/dev/mqueue").Run() })
}

// TestMessageQueuesAreTheJobs: the machine's /dev/mqueue shows the
// machine's POSIX message queues, and a file made there is a queue of the
// machine's. A step sees neither the machine's queues nor leaves one
// behind there for a later job.
func TestMessageQueuesAreTheJobs(t *testing.T) {
	needRoot(t, 2)
	hostMqueue(t)
	mine := filepath.Join("/dev/mqueue", "forgeci-host-queue")
	f, err := os.OpenFile(mine, os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer os.Remove(mine)
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			i := newIsolator(t, mode, 2, Limits{})
			b := newBox(t, i, 0, workDir(t))
			out, code := step(t, b, `ls -a /dev/mqueue 2>&1; touch /dev/mqueue/left-by-step && echo made`)
			// The step has a queue filesystem of its own, and can use it.
			if code != 0 || !strings.Contains(out, "made") {
				t.Errorf("the step's own /dev/mqueue (exit %d):\n%s", code, out)
			}
			if strings.Contains(out, "forgeci-host-queue") {
				t.Errorf("the step sees the machine's queues:\n%s", out)
			}
			if _, err := os.Stat("/dev/mqueue/left-by-step"); err == nil {
				os.Remove("/dev/mqueue/left-by-step")
				t.Errorf("the step made a queue of the machine's:\n%s", out)
			}
		})
	}
}
