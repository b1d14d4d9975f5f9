package templatetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/intrinsics"
)

// directives returns the key=value lines of a systemd unit, without
// comments, blank lines and section headers, sorted.
func directives(unit string) []string {
	var out []string
	for _, l := range strings.Split(unit, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
			continue
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// configKeys returns the keys of a key = value config file, sorted.
func configKeys(conf string) []string {
	var keys []string
	for _, l := range strings.Split(conf, "\n") {
		l = strings.TrimSpace(l)
		if k, _, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys = append(keys, strings.TrimSpace(k))
		}
	}
	sort.Strings(keys)
	return keys
}

// TestRunnerEC2Template: infra/runner-ec2.yaml parses; its IAM statements
// name their resources; its user data installs the same systemd unit and
// the same config keys as the office-hardware files.
func TestRunnerEC2Template(t *testing.T) {
	raw, err := os.ReadFile(root + "infra/runner-ec2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := &intrinsics.ProcessorOptions{IntrinsicHandlerOverrides: symbolic}
	tmpl, err := goformation.ParseYAMLWithOptions(raw, opts)
	if err != nil {
		t.Fatalf("runner-ec2.yaml does not parse: %v", err)
	}
	role, err := tmpl.GetIAMRoleWithName("RunnerRole")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range role.Policies {
		doc, _ := p.PolicyDocument.(map[string]any)
		stmts, _ := doc["Statement"].([]any)
		for _, s := range statements("RunnerRole", stmts) {
			for _, r := range s.resources {
				if r == "*" || strings.HasSuffix(r, ":*") {
					t.Errorf("RunnerRole: %v on wildcard %q", s.actions, r)
				}
			}
		}
	}
	lt, err := tmpl.GetEC2LaunchTemplateWithName("RunnerLaunchTemplate")
	if err != nil {
		t.Fatal(err)
	}
	if lt.LaunchTemplateData.MetadataOptions == nil || lt.LaunchTemplateData.MetadataOptions.HttpTokens == nil ||
		*lt.LaunchTemplateData.MetadataOptions.HttpTokens != "required" {
		t.Error("the launch template must require IMDSv2")
	}
	// The user data is in the raw YAML (Fn::Base64 of Fn::Sub).
	userData := string(raw[strings.Index(string(raw), "#!/bin/bash"):])
	unit := regexp.MustCompile(`(?s)<<'UNIT'\n(.*?)\n\s*UNIT\n`).FindStringSubmatch(userData)
	if unit == nil {
		t.Fatal("no systemd unit in the user data")
	}
	office, err := os.ReadFile(root + "infra/forgeci-runner.service")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := directives(unit[1]), directives(string(office)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("user data unit:\n%s\ninfra/forgeci-runner.service:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	conf := regexp.MustCompile(`(?s)<<CONF\n(.*?)\n\s*CONF\n`).FindStringSubmatch(userData)
	officeConf, err := os.ReadFile(root + "infra/forgeci-runner.conf")
	if err != nil {
		t.Fatal(err)
	}
	if conf == nil || strings.Join(configKeys(conf[1]), ",") != strings.Join(configKeys(string(officeConf)), ",") {
		t.Errorf("user data config keys %v, infra/forgeci-runner.conf keys %v", configKeys(conf[1]), configKeys(string(officeConf)))
	}
}

// TestRunnerConfig: the real runner accepts infra/forgeci-runner.conf (it
// gets as far as reading the token file), and install-runner.sh parses.
func TestRunnerConfig(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "forgeci-runner")
	build := exec.Command("go", "build", "-o", bin, "./runner/cmd/forgeci-runner")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build runner: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "run", "--config", root+"infra/forgeci-runner.conf").CombinedOutput()
	if !strings.Contains(string(out), "read token") {
		t.Fatalf("the runner did not accept infra/forgeci-runner.conf: %s", out)
	}
	if out, err := exec.Command("bash", "-n", root+"infra/install-runner.sh").CombinedOutput(); err != nil {
		t.Fatalf("install-runner.sh: %v\n%s", err, out)
	}
}
