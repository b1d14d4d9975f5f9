package templatetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/forgeci/forgeci/shared/scaling"
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
	// The Session Manager agent's actions take no resource; none of them
	// reads or writes a parameter (another stack's runner token), and no
	// managed policy (AmazonSSMManagedInstanceCore reads every parameter)
	// adds one.
	if len(role.ManagedPolicyArns) != 0 {
		t.Errorf("RunnerRole has managed policies %v", role.ManagedPolicyArns)
	}
	for _, p := range role.Policies {
		doc, _ := p.PolicyDocument.(map[string]any)
		stmts, _ := doc["Statement"].([]any)
		for _, s := range statements("RunnerRole", stmts) {
			for _, a := range s.actions {
				if p.PolicyName == "forgeci-runner-ssm-agent" && (strings.Contains(a, "Parameter") || strings.HasSuffix(a, "*")) {
					t.Errorf("RunnerRole: the agent's policy has %s", a)
				}
			}
			for _, r := range s.resources {
				if (r == "*" || strings.HasSuffix(r, ":*")) && p.PolicyName != "forgeci-runner-ssm-agent" {
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

var runnerBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// buildRunner builds forgeci-runner once for the package's tests.
func buildRunner(t *testing.T) string {
	runnerBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "forgeci-runner-")
		if err != nil {
			runnerBin.err = err
			return
		}
		runnerBin.path = filepath.Join(dir, "forgeci-runner")
		build := osexec.Command("go", "build", "-o", runnerBin.path, "./runner/cmd/forgeci-runner")
		build.Dir = root
		runnerBin.out, runnerBin.err = build.CombinedOutput()
	})
	if runnerBin.err != nil {
		t.Fatalf("build runner: %v\n%s", runnerBin.err, runnerBin.out)
	}
	return runnerBin.path
}

// TestRunnerConfig: the real runner accepts infra/forgeci-runner.conf (it
// gets as far as reading the token file), and install-runner.sh parses.
func TestRunnerConfig(t *testing.T) {
	bin := buildRunner(t)
	out, _ := osexec.Command(bin, "run", "--config", root+"infra/forgeci-runner.conf").CombinedOutput()
	if !strings.Contains(string(out), "read token") {
		t.Fatalf("the runner did not accept infra/forgeci-runner.conf: %s", out)
	}
	if out, err := osexec.Command("bash", "-n", root+"infra/install-runner.sh").CombinedOutput(); err != nil {
		t.Fatalf("install-runner.sh: %v\n%s", err, out)
	}
}

// parseRunner is infra/runner-ec2.yaml with its intrinsics resolved
// (symbolic), parameters overridden.
func parseRunner(t *testing.T, overrides map[string]any) (raw string, generic map[string]any) {
	t.Helper()
	b, err := os.ReadFile(root + "infra/runner-ec2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	processed, err := intrinsics.ProcessYAML(b, &intrinsics.ProcessorOptions{IntrinsicHandlerOverrides: symbolic, ParameterOverrides: overrides})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(processed, &generic); err != nil {
		t.Fatal(err)
	}
	return string(b), generic
}

// TestRunnerEC2Single: by default one long-lived runner, replaced when its
// instance fails, with nothing of the elastic mode.
func TestRunnerEC2Single(t *testing.T) {
	_, g := parseRunner(t, nil)
	asg := dig(g, "Resources", "RunnerGroup", "Properties")
	if dig(asg, "DesiredCapacity") != "1" || dig(asg, "MaxSize") != "1" || dig(asg, "LaunchTemplate") == nil {
		t.Errorf("single: group %v", asg)
	}
	if dig(asg, "MixedInstancesPolicy") != nil || dig(asg, "NewInstancesProtectedFromScaleIn") != false {
		t.Errorf("single: elastic settings on the group: %v", asg)
	}
	if strings.Contains(fmt.Sprint(dig(asg, "Tags")), "ForgeciScaler") {
		t.Error("single: the group carries the scaler's tag")
	}
	if dig(g, "Resources", "RetirePolicy", "Condition") != "Elastic" || dig(g, "Outputs", "ScaleGroup", "Condition") != "Elastic" {
		t.Error("the retire permission and the scale group output must exist only when elastic")
	}
}

// TestRunnerEC2Elastic: Scaling=elastic makes a group of zero to MaxSize
// spot instances of several types, which the named control plane's
// scaler (only) may resize, protected from scale-in; each instance runs
// the same unit, ephemeral, through a drop-in the real runner accepts,
// and leaves its group when done; the output is an entry the scaler
// parses, naming this group and runner.
func TestRunnerEC2Elastic(t *testing.T) {
	raw, g := parseRunner(t, map[string]any{"Scaling": "elastic", "ControlPlaneStack": "ci"})
	asg := dig(g, "Resources", "RunnerGroup", "Properties")
	if dig(asg, "DesiredCapacity") != nil || dig(asg, "MinSize") != "0" || fmt.Sprint(dig(asg, "MaxSize")) != "4" ||
		dig(asg, "NewInstancesProtectedFromScaleIn") != true || dig(asg, "LaunchTemplate") != nil {
		t.Errorf("elastic: group %v", asg)
	}
	mip := dig(asg, "MixedInstancesPolicy")
	var types []string
	for _, o := range dig(mip, "LaunchTemplate", "Overrides").([]any) {
		if o != nil {
			types = append(types, fmt.Sprint(dig(o, "InstanceType")))
		}
	}
	if strings.Join(types, ",") != "t4g.medium,t4g.large,m7g.medium" {
		t.Errorf("elastic: instance types %v", types)
	}
	if fmt.Sprint(dig(mip, "InstancesDistribution", "OnDemandPercentageAboveBaseCapacity")) != "0" {
		t.Errorf("elastic: spot by default, got %v", dig(mip, "InstancesDistribution"))
	}
	var tagged bool
	for _, tag := range dig(asg, "Tags").([]any) {
		if dig(tag, "Key") == "ForgeciScaler" {
			tagged = dig(tag, "Value") == "ci" && dig(tag, "PropagateAtLaunch") == false
		}
	}
	if !tagged {
		t.Errorf("elastic: the group must carry ForgeciScaler=ci (not propagated): %v", dig(asg, "Tags"))
	}
	if got := dig(g, "Resources", "RunnerLaunchTemplate", "Properties", "LaunchTemplateData", "InstanceInitiatedShutdownBehavior"); got != "terminate" {
		t.Errorf("elastic: shutdown behaviour %v", got)
	}
	name := "sub:${AWS::StackName}-runners"
	if dig(asg, "AutoScalingGroupName") != name {
		t.Errorf("group name %v", dig(asg, "AutoScalingGroupName"))
	}
	retire := fmt.Sprint(dig(g, "Resources", "RetirePolicy", "Properties", "PolicyDocument", "Statement"))
	if !strings.Contains(retire, "autoscaling:TerminateInstanceInAutoScalingGroup") || !strings.Contains(retire, "autoScalingGroupName/${AWS::StackName}-runners") {
		t.Errorf("the retire permission must name this group only: %s", retire)
	}
	checkElasticUserData(t, raw)
	checkScaleGroupOutput(t, raw)
}

// userData is the launch template's user data as CloudFormation would
// hand it to the instance, its ${...} substitutions left as they are.
func userData(t *testing.T, g map[string]any) string {
	t.Helper()
	enc, _ := dig(g, "Resources", "RunnerLaunchTemplate", "Properties", "LaunchTemplateData", "UserData").(string)
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || !strings.HasPrefix(string(raw), "sub:#!/bin/bash") {
		t.Fatalf("user data %q: %v", enc, err)
	}
	return strings.TrimPrefix(string(raw), "sub:")
}

// TestRunnerEC2UserData: the user data is valid bash; it keeps every user
// but root from the instance metadata service (whose credentials are the
// instance role's) with rules nft accepts, at setup and at every start of
// the runner; an elastic instance whose setup fails leaves its group.
func TestRunnerEC2UserData(t *testing.T) {
	_, g := parseRunner(t, nil)
	ud := userData(t, g)
	script := filepath.Join(t.TempDir(), "user-data.sh")
	if err := os.WriteFile(script, []byte(ud), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("user data: %v\n%s", err, out)
	}
	rules := regexp.MustCompile(`(?s)<<'NFT'\n(.*?)\nNFT\n`).FindStringSubmatch(ud)
	if rules == nil || !strings.Contains(rules[1], "ip daddr 169.254.169.254 meta skuid != 0") {
		t.Fatalf("no metadata rules for non-root users in the user data")
	}
	nft, err := osexec.LookPath("nft")
	if err != nil {
		t.Fatal("nft is not installed (make deps installs nftables)")
	}
	file := filepath.Join(t.TempDir(), "imds.nft")
	if err := os.WriteFile(file, []byte(rules[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command(nft, "-c", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("nft refuses the metadata rules: %v\n%s", err, out)
	}
	for _, want := range []string{"nft -f /etc/forgeci-runner-imds.nft\n", "ExecStartPre=/usr/sbin/nft -f /etc/forgeci-runner-imds.nft"} {
		if !strings.Contains(ud, want) {
			t.Errorf("user data lacks %q", want)
		}
	}
	trap := strings.Index(ud, "trap 'rc=$?; [ \"$rc\" -eq 0 ] || /usr/local/sbin/forgeci-retire' EXIT")
	if trap < 0 || trap > strings.Index(ud, "dnf install") {
		t.Error("an elastic instance must arrange to leave its group before any setup step can fail")
	}
}

// checkElasticUserData: the drop-in replaces ExecStart with an ephemeral
// one-job runner the real binary accepts, does not restart, and retires
// the instance; the retire script is valid bash.
func checkElasticUserData(t *testing.T, raw string) {
	dropIn := regexp.MustCompile(`(?s)<<'DROPIN'\n(.*?)\n\s*DROPIN\n`).FindStringSubmatch(raw)
	retire := regexp.MustCompile(`(?s)<<'RETIRE'\n(.*?)\n\s*RETIRE\n`).FindStringSubmatch(raw)
	if dropIn == nil || retire == nil {
		t.Fatal("no elastic drop-in or retire script in the user data")
	}
	d := directives(dropIn[1])
	var exec string
	for _, l := range d {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok && v != "" {
			exec = v
		}
	}
	for _, want := range []string{"ExecStart=", "Restart=no", "ExecStopPost=/usr/local/sbin/forgeci-retire"} {
		if !slices.Contains(d, want) {
			t.Errorf("drop-in lacks %q: %v", want, d)
		}
	}
	args := strings.Fields(strings.ReplaceAll(exec, "${IdleMinutes}", "15"))
	if len(args) < 2 || !slices.Contains(args, "--ephemeral") || !slices.Contains(args, "--max-idle") {
		t.Fatalf("drop-in ExecStart %q", exec)
	}
	bin := buildRunner(t)
	for i, a := range args {
		if a == "/etc/forgeci-runner.conf" {
			args[i] = root + "infra/forgeci-runner.conf"
		}
	}
	out, _ := osexec.Command(bin, args[1:]...).CombinedOutput()
	if !strings.Contains(string(out), "read token") {
		t.Errorf("the runner refused the drop-in's command line %v: %s", args[1:], out)
	}
	script := filepath.Join(t.TempDir(), "forgeci-retire")
	body := regexp.MustCompile(`(?m)^            `).ReplaceAllString(retire[1], "")
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("forgeci-retire: %v\n%s", err, out)
	}
	if !strings.Contains(body, "--should-decrement-desired-capacity") || !strings.Contains(body, "shutdown -h now") {
		t.Errorf("forgeci-retire must leave the group lowering its capacity, and shut down failing that:\n%s", body)
	}
}

// checkScaleGroupOutput: the ScaleGroup output, substituted as
// CloudFormation would, is an entry scaling.ParseGroups accepts.
func checkScaleGroupOutput(t *testing.T, raw string) {
	m := regexp.MustCompile(`(?m)^      - '(\{"asg".*)'$`).FindStringSubmatch(raw)
	if m == nil {
		t.Fatal("no ScaleGroup output")
	}
	entry := strings.NewReplacer("${AWS::StackName}", "office", "${LabelList}", `linux", "arm64", "ec2`, "${MaxSize}", "4").Replace(m[1])
	gs, err := scaling.ParseGroups("[" + entry + "]")
	if err != nil {
		t.Fatalf("ScaleGroup output %s: %v", entry, err)
	}
	if g := gs[0]; g.ASG != "office-runners" || g.Runner != "office" || strings.Join(g.Labels, ",") != "linux,arm64,ec2" || g.Max != 4 {
		t.Errorf("ScaleGroup output %+v", g)
	}
}
