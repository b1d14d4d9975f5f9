package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstallRunner runs infra/install-runner.sh into a scratch root (there
// is no systemd running here): it makes the slot users, keeps the token
// root's, writes a config with isolation on, and installs a unit that
// systemd-analyze verify accepts. Then the installed runner, with the
// installed config, runs a job as a slot user to PASSED.
func TestInstallRunner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("install-runner.sh runs as root (CI runs as root)")
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is missing: scripts/deps.sh installs it (make test runs it)")
	}
	s := start(t)
	scratch := scratchRoot(t)
	out, err := s.forgeci("runner", "token", "create", "--json")
	var reg struct {
		Token string `json:"registration_token"`
	}
	if err != nil || json.Unmarshal([]byte(out), &reg) != nil {
		t.Fatalf("runner token create: %v %s", err, out)
	}
	install := exec.Command("bash", "../../infra/install-runner.sh", "--root", scratch, "--binary", filepath.Join(s.bin, "forgeci-runner"),
		"--server", s.vals["FORGECI_URL"], "--registration-token", reg.Token, "--name", "installed", "--concurrency", "2")
	if b, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install-runner.sh: %v\n%s", err, b)
	}
	passwd, _ := os.ReadFile(filepath.Join(scratch, "etc/passwd"))
	for _, u := range []string{"forgeci-slot0:", "forgeci-slot1:"} {
		if !strings.Contains(string(passwd), "\n"+u) {
			t.Errorf("slot user %s was not made", u)
		}
	}
	for path, want := range map[string]os.FileMode{"var/lib/forgeci-runner": 0o711, "var/lib/forgeci-runner/work": 0o711,
		"var/lib/forgeci-runner/token": 0o600, "etc/forgeci-runner.conf": 0o600, "usr/local/bin/forgeci-runner": 0o755} {
		fi, err := os.Stat(filepath.Join(scratch, path))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %v", path, err, fi.Mode().Perm(), want)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(scratch, "etc/forgeci-runner.conf"))
	for _, want := range []string{"isolation = user", "concurrency = 2", "server = " + s.vals["FORGECI_URL"]} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("the config lacks %q:\n%s", want, conf)
		}
	}
	verifyUnit(t, scratch)

	// The installed runner with the installed config (its paths moved into
	// the scratch root) runs a job as a slot user.
	_ = s.runner.Process.Kill()
	_, _ = s.runner.Process.Wait()
	run := exec.Command(filepath.Join(scratch, "usr/local/bin/forgeci-runner"), "run", "--config", filepath.Join(scratch, "etc/forgeci-runner.conf"),
		"--token-file", filepath.Join(scratch, "var/lib/forgeci-runner/token"), "--work-dir", filepath.Join(scratch, "var/lib/forgeci-runner/work"))
	logf, _ := os.Create(filepath.Join(s.dir, "installed.log"))
	run.Stdout, run.Stderr = logf, logf
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = run.Process.Kill()
		_, _ = run.Process.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(s.dir, "installed.log"))
			t.Logf("installed runner's log:\n%s", b)
		}
	})
	id, err := s.submit(writePipeline(t, "jobs:\n  whoami:\n    runs-on: linux\n    steps:\n      - run: echo \"as $(id -un)\"; test \"$(id -u)\" != 0\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	v := s.waitRun(id, func(v runView) bool { return v.State == "PASSED" || v.State == "FAILED" }, 60*time.Second)
	log := s.log(id, v.Jobs[0].ID)
	if v.State != "PASSED" || !strings.Contains(log, "as forgeci-slot") {
		t.Fatalf("run %s, log:\n%s", v.State, log)
	}
}

// scratchRoot is an empty machine root outside /tmp (the installed runner
// works there), with the account files useradd --prefix edits, less any
// slot users this machine already has.
func scratchRoot(t *testing.T) string {
	dir, err := os.MkdirTemp("/var/lib", "forgeci-install-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A machine's root: anyone may pass through.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"passwd", "group", "shadow", "gshadow", "login.defs"} {
		b, err := os.ReadFile(filepath.Join("/etc", f))
		if err != nil {
			continue
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "forgeci-slot") {
				keep = append(keep, l)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "etc", f), []byte(strings.Join(keep, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// verifyUnit runs systemd-analyze verify on the installed unit (with the
// system's own units beside it, which it refers to), and shows that verify
// would catch a broken one.
func verifyUnit(t *testing.T, scratch string) {
	t.Helper()
	units := filepath.Join(scratch, "usr/lib/systemd")
	if err := os.MkdirAll(units, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", "-r", "/usr/lib/systemd/system", units).CombinedOutput(); err != nil {
		t.Fatalf("copy system units: %v %s", err, b)
	}
	verify := func(unit string) (string, error) {
		b, err := exec.Command("systemd-analyze", "--root="+scratch, "--man=no", "verify", unit).CombinedOutput()
		return string(b), err
	}
	if out, err := verify("/etc/systemd/system/forgeci-runner.service"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	unit, _ := os.ReadFile(filepath.Join(scratch, "etc/systemd/system/forgeci-runner.service"))
	broken := strings.Replace(string(unit), "ExecStart=/usr/local/bin/forgeci-runner", "ExecStart=/usr/local/bin/forgeci-runner-missing", 1)
	_ = os.WriteFile(filepath.Join(scratch, "etc/systemd/system/broken.service"), []byte(broken), 0o644)
	if out, err := verify("/etc/systemd/system/broken.service"); err == nil {
		t.Fatalf("systemd-analyze verify accepts a unit whose binary is missing:\n%s", out)
	}
}

// forgeci runs the CLI as the admin.
func (s *stack) forgeci(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.bin, "forgeci"), args...)
	cmd.Env = append(os.Environ(), "FORGECI_URL="+s.vals["FORGECI_URL"], "FORGECI_TOKEN="+s.vals["FORGECI_TOKEN"])
	b, err := cmd.CombinedOutput()
	return string(b), err
}
