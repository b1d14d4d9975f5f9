// Package templatetest checks template.yaml with goformation: it parses
// under each deployment shape, every function can be built by the Makefile
// and is wired to the handler routes of api.Routes, and every IAM statement
// is scoped (no "*" resource for S3 or Secrets Manager).
package templatetest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/cloudformation/serverless"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/forgeci/forgeci/shared/api"
	_ "github.com/forgeci/forgeci/shared/ui" // the dashboard registers its routes
)

const root = "../../"

// integerParams are the parameters the template uses as integers.
var integerParams = map[string]bool{"ClaimConcurrency": true, "LogRetentionDays": true}

// shapes are the deployment choices the template's parameters offer; each
// must parse and pass every check.
var shapes = map[string]map[string]any{
	"default (aurora pausing, public database by IAM token, no NAT, no proxy)": nil,
	"private VPC, aurora, proxy": {"NetworkShape": "private-vpc", "UseRdsProxy": "true"},
	"rds instance, private, no proxy, existing VPC": {
		"DatabaseEngine": "rds-instance", "NetworkShape": "private-vpc", "VpcId": "vpc-0123",
		"SubnetIds": "subnet-a,subnet-b", "RouteTableIds": "rtb-a",
	},
	"GitHub App and identity tokens": {"GitHubAppId": "123", "PublicUrl": "https://ci.example.com", "RotateSecretsKey": "true"},
}

// inVpc says whether a shape puts the functions in a VPC.
func inVpc(overrides map[string]any) bool { return overrides["NetworkShape"] == "private-vpc" }

// symbolic keeps references to resources visible after goformation's
// intrinsic processing, which would otherwise resolve them to nil: a Ref to
// a parameter is its default (or override), a Ref to a resource becomes
// "ref:<Name>", Fn::GetAtt "getatt:<Name>.<Attr>", Fn::Sub "sub:<template>".
var symbolic = map[string]intrinsics.IntrinsicHandler{
	"Ref": func(name string, input, template any) any {
		if v := intrinsics.Ref(name, input, template); v != nil {
			// A parameter used for an integer property (CloudFormation
			// coerces; goformation's typed structs do not).
			if s, ok := v.(string); ok && integerParams[fmt.Sprint(input)] {
				var n int
				if _, err := fmt.Sscan(s, &n); err == nil {
					return n
				}
			}
			// CloudFormation splits list parameters; goformation does not.
			if s, ok := v.(string); ok && strings.HasPrefix(fmt.Sprint(dig(template, "Parameters", fmt.Sprint(input), "Type")), "CommaDelimitedList") {
				var list []any
				for _, p := range strings.Split(s, ",") {
					list = append(list, p)
				}
				return list
			}
			return v
		}
		s, _ := input.(string)
		if s == "AWS::NoValue" {
			return nil
		}
		return "ref:" + s
	},
	"Fn::GetAtt": func(name string, input, template any) any {
		switch v := input.(type) {
		case []any:
			parts := make([]string, len(v))
			for i, p := range v {
				parts[i] = fmt.Sprint(p)
			}
			return "getatt:" + strings.Join(parts, ".")
		case string:
			return "getatt:" + v
		}
		return nil
	},
	"Fn::If": func(name string, input, template any) any {
		arr, ok := input.([]any)
		if !ok || len(arr) != 3 {
			return nil
		}
		if evalCondition(fmt.Sprint(arr[0]), template) {
			return arr[1]
		}
		return arr[2]
	},
	"Fn::Sub": func(name string, input, template any) any {
		switch v := input.(type) {
		case []any:
			return "sub:" + fmt.Sprint(v[0])
		case string:
			return "sub:" + v
		}
		return nil
	},
}

// evalCondition evaluates a named condition of the template against the
// parameters' defaults (with the overrides applied). goformation's own
// condition evaluation replaces any map with a Condition key, resources
// included, so it cannot be used here.
func evalCondition(name string, template any) bool {
	var eval func(v any) any
	eval = func(v any) any {
		m, ok := v.(map[string]any)
		if !ok {
			// goformation may have replaced a {"Condition": X} by X.
			if name, ok := v.(string); ok && dig(template, "Conditions", name) != nil {
				return evalCondition(name, template)
			}
			return v
		}
		for k, arg := range m {
			args, _ := arg.([]any)
			switch k {
			case "Condition":
				return evalCondition(fmt.Sprint(arg), template)
			case "Ref":
				d := dig(template, "Parameters", fmt.Sprint(arg), "Default")
				if d == nil {
					return ""
				}
				return d
			case "Fn::Equals":
				return fmt.Sprint(eval(args[0])) == fmt.Sprint(eval(args[1]))
			case "Fn::Not":
				return !(eval(args[0]).(bool))
			case "Fn::And", "Fn::Or":
				all, any := true, false
				for _, a := range args {
					b := eval(a).(bool)
					all, any = all && b, any || b
				}
				return map[string]bool{"Fn::And": all, "Fn::Or": any}[k]
			case "Fn::Join":
				return strings.Join(strings.Split(fmt.Sprint(eval(args[1])), ","), fmt.Sprint(args[0]))
			}
		}
		panic(fmt.Sprintf("condition %s: cannot evaluate %v", name, v))
	}
	b, ok := eval(dig(template, "Conditions", name)).(bool)
	if !ok {
		panic(fmt.Sprintf("condition %s does not evaluate to a boolean", name))
	}
	return b
}

// newerThanGoformation are properties CloudFormation (and cfn-lint, below)
// know and goformation v7.14.9's typed structs do not: left out of the
// typed parse, checked in the generic one.
var newerThanGoformation = regexp.MustCompile(`(?m)^ +(SecondsUntilAutoPause: .*|LoggingConfig: \{LogGroup: .*\})\n`)

func parse(t *testing.T, overrides map[string]any) (*cloudformation.Template, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(root + "template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := &intrinsics.ProcessorOptions{IntrinsicHandlerOverrides: symbolic, ParameterOverrides: overrides}
	tmpl, err := goformation.ParseYAMLWithOptions(newerThanGoformation.ReplaceAll(raw, nil), opts)
	if err != nil {
		t.Fatalf("template.yaml does not parse: %v", err)
	}
	processed, err := intrinsics.ProcessYAML(raw, opts)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(processed, &generic); err != nil {
		t.Fatal(err)
	}
	return tmpl, generic
}

func TestTemplate(t *testing.T) {
	for name, overrides := range shapes {
		t.Run(name, func(t *testing.T) {
			tmpl, generic := parse(t, overrides)
			t.Run("Globals", func(t *testing.T) { checkGlobals(t, generic, overrides) })
			t.Run("Functions", func(t *testing.T) { checkFunctions(t, tmpl) })
			t.Run("Routes", func(t *testing.T) { checkRoutes(t, tmpl) })
			t.Run("Limits", func(t *testing.T) { checkLimits(t, tmpl, generic) })
			t.Run("Policies", func(t *testing.T) { checkPolicies(t, tmpl, generic, overrides) })
			t.Run("Bucket", func(t *testing.T) { checkBucket(t, tmpl) })
			t.Run("Database", func(t *testing.T) { checkDatabase(t, tmpl, generic, overrides) })
			t.Run("Network", func(t *testing.T) { checkNetwork(t, tmpl, generic, overrides) })
			t.Run("Idle", func(t *testing.T) { checkIdle(t, generic, overrides) })
			t.Run("Outputs", func(t *testing.T) {
				for _, o := range []string{"ApiUrl", "BucketName"} {
					if _, ok := tmpl.Outputs[o]; !ok {
						t.Errorf("no output %s", o)
					}
				}
			})
		})
	}
}

func checkGlobals(t *testing.T, generic map[string]any, overrides map[string]any) {
	fn, _ := dig(generic, "Globals", "Function").(map[string]any)
	if fn == nil {
		t.Fatal("no Globals.Function")
	}
	want := map[string]any{"Runtime": "provided.al2023", "Handler": "bootstrap", "Tracing": "Active"}
	for k, v := range want {
		if fn[k] != v {
			t.Errorf("Globals.Function.%s = %v, want %v", k, fn[k], v)
		}
	}
	if fmt.Sprint(fn["Architectures"]) != "[arm64]" {
		t.Errorf("Globals.Function.Architectures = %v, want [arm64]", fn["Architectures"])
	}
	if dig(fn, "LoggingConfig", "LogFormat") != "JSON" {
		t.Error("Globals.Function.LoggingConfig.LogFormat is not JSON")
	}
	if fn["Timeout"] == nil || fn["MemorySize"] == nil {
		t.Error("Globals.Function needs Timeout and MemorySize")
	}
	vpc := dig(fn, "VpcConfig", "SecurityGroupIds") != nil && dig(fn, "VpcConfig", "SubnetIds") != nil
	if vpc != inVpc(overrides) {
		t.Errorf("Globals.Function.VpcConfig with security groups and subnets: %v, want %v", vpc, inVpc(overrides))
	}
	env, _ := dig(fn, "Environment", "Variables").(map[string]any)
	wantEnv, notEnv := "FORGECI_DATABASE_IAM_USER", "FORGECI_DATABASE_CREDENTIALS_SECRET_ARN"
	if inVpc(overrides) {
		wantEnv, notEnv = notEnv, wantEnv
	}
	for _, k := range []string{"FORGECI_DATABASE_HOST", wantEnv, "FORGECI_BUCKET"} {
		if env[k] == nil {
			t.Errorf("Globals environment has no %s", k)
		}
	}
	if env[notEnv] != nil {
		t.Errorf("Globals environment has %s in this shape", notEnv)
	}
	if _, ok := env["FORGECI_DATABASE_URL"]; ok {
		t.Error("FORGECI_DATABASE_URL must not be in the template: it would hold a password")
	}
}

// checkFunctions: every functions/<name> is in the template as
// <Name>Function, built with BuildMethod makefile by a Makefile target
// build-<LogicalId> that runs the static, stripped, norpc build of that
// directory; every template function has a functions/<name>/main.go.
func checkFunctions(t *testing.T, tmpl *cloudformation.Template) {
	makefile, err := os.ReadFile(root + "Makefile")
	if err != nil {
		t.Fatal(err)
	}
	macro := regexp.MustCompile(`(?m)^lambda = (.*\\\n)*.*$`).Find(makefile)
	for _, flag := range []string{"CGO_ENABLED=0", "GOOS=linux", "-tags lambda.norpc", "-trimpath", "-ldflags='-s -w'", "-o $(ARTIFACTS_DIR)/bootstrap"} {
		if !strings.Contains(string(macro), flag) {
			t.Errorf("the Makefile's lambda build macro lacks %s:\n%s", flag, macro)
		}
	}
	fns := tmpl.GetAllServerlessFunctionResources()
	dirs, err := os.ReadDir(root + "functions")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, ok := fns[logicalID(d.Name())]; !ok {
			t.Errorf("functions/%s is not in template.yaml as %s", d.Name(), logicalID(d.Name()))
		}
	}
	for id, fn := range fns {
		name, ok := strings.CutSuffix(id, "Function")
		if !ok {
			t.Errorf("function %s: logical IDs must be <Name>Function", id)
			continue
		}
		name = strings.ToLower(name)
		if _, err := os.Stat(root + "functions/" + name + "/main.go"); err != nil {
			t.Errorf("%s has no functions/%s/main.go", id, name)
		}
		if fn.AWSCloudFormationMetadata["BuildMethod"] != "makefile" {
			t.Errorf("%s: Metadata.BuildMethod is %v, want makefile", id, fn.AWSCloudFormationMetadata["BuildMethod"])
		}
		target := regexp.MustCompile(`(?m)^build-` + id + `: ; \$\(call lambda,` + name + `\)$`)
		if !target.Match(makefile) {
			t.Errorf("Makefile has no target `build-%s: ; $(call lambda,%s)`", id, name)
		}
		if fn.CodeUri == nil || fn.CodeUri.String == nil || *fn.CodeUri.String != "." {
			t.Errorf("%s: CodeUri must be . (the module root, for the Makefile)", id)
		}
	}
}

// checkLimits: every function has reserved concurrency (by default), so a
// flood on one route cannot take the account's concurrency, in all small
// enough to leave the account's 100 unreserved executions on a limit of
// 1,000; and the routes a flood costs most on have their own throttles.
func checkLimits(t *testing.T, tmpl *cloudformation.Template, generic map[string]any) {
	total := 0
	for id, fn := range tmpl.GetAllServerlessFunctionResources() {
		if fn.ReservedConcurrentExecutions == nil || *fn.ReservedConcurrentExecutions < 1 {
			t.Errorf("%s has no reserved concurrency", id)
			continue
		}
		total += *fn.ReservedConcurrentExecutions
	}
	if total > 300 {
		t.Errorf("reserved concurrency %d in all: more than 300", total)
	}
	throttled := map[string]bool{}
	walk(generic["Resources"], func(m map[string]any) {
		if m["Type"] != "HttpApi" {
			return
		}
		props, _ := m["Properties"].(map[string]any)
		settings, _ := props["RouteSettings"].(map[string]any)
		if settings["ThrottlingBurstLimit"] != nil && settings["ThrottlingRateLimit"] != nil {
			throttled[fmt.Sprint(props["Method"], " ", props["Path"])] = true
		}
	})
	for _, r := range []string{"POST /v1/runner/claim", "POST /v1/runners/register", "POST /login", "POST /v1/webhooks/github"} {
		if !throttled[r] {
			t.Errorf("route %s has no throttle of its own", r)
		}
	}
}

func logicalID(dir string) string { return strings.ToUpper(dir[:1]) + dir[1:] + "Function" }

// checkRoutes: the HttpApi events of each function are exactly its routes
// in api.Routes, on the template's HttpApi; the scheduled functions run
// every minute; nothing else has events.
func checkRoutes(t *testing.T, tmpl *cloudformation.Template) {
	got := map[string][]string{}
	scheduled := map[string]string{}
	for id, fn := range tmpl.GetAllServerlessFunctionResources() {
		name := strings.ToLower(strings.TrimSuffix(id, "Function"))
		for evName, ev := range fn.Events {
			switch ev.Type {
			case "HttpApi":
				p := ev.Properties.HttpApiEvent
				if p == nil || p.Method == nil || p.Path == nil {
					t.Errorf("%s event %s: HttpApi needs Method and Path", id, evName)
					continue
				}
				if p.ApiId == nil || *p.ApiId != "ref:Api" {
					t.Errorf("%s event %s: ApiId must be !Ref Api", id, evName)
				}
				got[name] = append(got[name], *p.Method+" "+*p.Path)
			case "Schedule":
				if p := ev.Properties.ScheduleEvent; p != nil {
					scheduled[name] = p.Schedule
				}
			default:
				t.Errorf("%s event %s: unexpected type %s", id, evName, ev.Type)
			}
		}
	}
	want := map[string][]string{}
	for _, name := range api.Functions() {
		for _, r := range api.Routes(name) {
			want[name] = append(want[name], r.Method+" "+r.Path)
		}
	}
	for _, m := range []map[string][]string{got, want} {
		for _, rs := range m {
			sort.Strings(rs)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("template HttpApi routes:\n%v\nhandler routes (api.Routes):\n%v", got, want)
	}
	wantSchedule := map[string]string{"sweeper": "rate(1 minute)", "scm": "rate(1 minute)", "gc": "rate(10 minutes)", "scaler": "rate(1 minute)"}
	if fmt.Sprint(scheduled) != fmt.Sprint(wantSchedule) {
		t.Errorf("scheduled functions %v, want %v", scheduled, wantSchedule)
	}
}

// statement is one IAM policy statement, flattened to strings.
type statement struct {
	where     string
	effect    string
	actions   []string
	resources []string
}

func statements(where string, raw []any) []statement {
	var out []statement
	for _, r := range raw {
		m, _ := r.(map[string]any)
		if m == nil {
			continue // a statement left out by its condition
		}
		out = append(out, statement{where: where, effect: fmt.Sprint(m["Effect"]),
			actions: strs(m["Action"]), resources: strs(m["Resource"])})
	}
	return out
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}

// checkPolicies: every function has an inline policy; it can read the
// database credentials and every secret named by a *_SECRET_ARN variable of
// its own; no Allow statement anywhere in the template has a "*" resource
// for an S3 or Secrets Manager action; S3 resources are the CAS bucket's,
// secrets resources are secrets of this template.
func checkPolicies(t *testing.T, tmpl *cloudformation.Template, generic map[string]any, overrides map[string]any) {
	secrets := map[string]bool{}
	for id, r := range tmpl.Resources {
		if r.AWSCloudFormationType() == "AWS::SecretsManager::Secret" {
			secrets["ref:"+id] = true
		}
	}
	base := basePolicy(t, generic)
	var all []statement
	for id, fn := range tmpl.GetAllServerlessFunctionResources() {
		own := append([]statement{}, base.statements...)
		if fn.Policies != nil && fn.Policies.IAMPolicyDocumentArray != nil {
			for _, doc := range *fn.Policies.IAMPolicyDocumentArray {
				own = append(own, statements(id, doc.Statement)...)
			}
		}
		if !base.roles["ref:"+id+"Role"] {
			t.Errorf("%s's role is not in FunctionBasePolicy's Roles", id)
		}
		all = append(all, own...)
		readable, connects := map[string]bool{}, false
		for _, s := range own {
			if s.effect == "Allow" && slices.Contains(s.actions, "secretsmanager:GetSecretValue") {
				for _, r := range s.resources {
					readable[r] = true
				}
			}
			connects = connects || s.effect == "Allow" && slices.Contains(s.actions, "rds-db:connect")
		}
		env := functionEnv(fn)
		switch {
		case env["FORGECI_DATABASE_CREDENTIALS_SECRET_ARN"] != "" || inVpc(overrides):
			if !readable["ref:DatabaseSecret"] {
				t.Errorf("%s cannot read the database credentials (secretsmanager:GetSecretValue on !Ref DatabaseSecret)", id)
			}
		case !connects:
			t.Errorf("%s can neither read the database credentials nor log in by IAM token (rds-db:connect)", id)
		case readable["ref:DatabaseSecret"]:
			t.Errorf("%s may read the master password, which it does not use", id)
		}
		for k, v := range env {
			if strings.HasSuffix(k, "_SECRET_ARN") && v != "" && !readable[v] {
				t.Errorf("%s: %s=%v but the function may not read that secret", id, k, v)
			}
		}
	}
	// Roles, bucket policies and endpoint policies outside the functions.
	walk(generic["Resources"], func(m map[string]any) {
		if _, ok := m["Statement"]; ok {
			if raw, ok := m["Statement"].([]any); ok {
				all = append(all, statements("template", raw)...)
			}
		}
	})
	for _, s := range all {
		if s.effect != "Allow" {
			continue
		}
		// Signing with the identity token key mints tokens clouds trust (the
		// walk over every resource meets the oidc function's own again).
		if slices.Contains(s.actions, "kms:Sign") && s.where != "OidcFunction" && s.where != "template" {
			t.Errorf("%s may call kms:Sign: only the oidc function may", s.where)
		}
		for _, a := range s.actions {
			service, _, _ := strings.Cut(a, ":")
			if service != "s3" && service != "secretsmanager" {
				continue
			}
			if a == service+":*" {
				t.Errorf("%s: Allow %s grants every %s action", s.where, a, service)
			}
			if len(s.resources) == 0 {
				t.Errorf("%s: %s has no Resource", s.where, a)
			}
			for _, r := range s.resources {
				switch {
				case r == "*" || strings.HasPrefix(r, "arn:aws:s3:::*") || strings.Contains(r, ":secret:*"):
					t.Errorf("%s: %s on wildcard resource %q", s.where, a, r)
				case service == "s3" && !strings.Contains(r, "CasBucket"):
					t.Errorf("%s: %s on %q, which is not the CAS bucket", s.where, a, r)
				case service == "secretsmanager" && !secrets[r]:
					t.Errorf("%s: %s on %q, which is not a secret of this template", s.where, a, r)
				}
			}
		}
	}
	// The functions that record deliveries (webhooks, manual runs and
	// retried deliveries, schedule firings) kick the scm function by
	// name (a Ref would be a dependency cycle: scm refers to the Api, the
	// Api to the webhook).
	const scmName = "${AWS::StackName}-scm"
	for _, name := range []string{"WebhookFunction", "ApiFunction", "UiFunction", "SweeperFunction"} {
		fn := tmpl.GetAllServerlessFunctionResources()[name]
		if fn == nil {
			t.Errorf("no %s", name)
			continue
		}
		var invokes bool
		for _, doc := range *fn.Policies.IAMPolicyDocumentArray {
			for _, s := range statements(name, doc.Statement) {
				invokes = invokes || (slices.Contains(s.actions, "lambda:InvokeFunction") &&
					slices.Equal(s.resources, []string{"sub:arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:" + scmName}))
			}
		}
		if !invokes {
			t.Errorf("%s may not invoke ScmFunction (lambda:InvokeFunction on the scm function's ARN only)", name)
		}
		if functionEnv(fn)["FORGECI_SCM_FUNCTION"] != "sub:"+scmName {
			t.Errorf("%s needs FORGECI_SCM_FUNCTION: !Sub %s", name, scmName)
		}
	}
	scm := tmpl.GetAllServerlessFunctionResources()["ScmFunction"]
	if scm == nil || scm.FunctionName == nil || *scm.FunctionName != "sub:"+scmName {
		t.Errorf("ScmFunction needs FunctionName: !Sub %s", scmName)
	}
}

type base struct {
	roles      map[string]bool
	statements []statement
}

// basePolicy is FunctionBasePolicy: the roles it is on, its statements.
func basePolicy(t *testing.T, generic map[string]any) base {
	p := dig(generic, "Resources", "FunctionBasePolicy", "Properties")
	if p == nil {
		t.Fatal("no FunctionBasePolicy")
	}
	b := base{roles: map[string]bool{}}
	for _, r := range strs(dig(p, "Roles")) {
		b.roles[r] = true
	}
	raw, _ := dig(p, "PolicyDocument", "Statement").([]any)
	b.statements = statements("FunctionBasePolicy", raw)
	return b
}

func functionEnv(fn *serverless.Function) map[string]string {
	if fn.Environment == nil {
		return nil
	}
	return fn.Environment.Variables
}

func walk(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(v)
		for _, x := range v {
			walk(x, fn)
		}
	case []any:
		for _, x := range v {
			walk(x, fn)
		}
	}
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// checkBucket: private, encrypted, and incomplete multipart uploads are
// aborted (the CAS writes only sha256/<hex>, so no prefix of unreferenced
// uploads exists to expire).
func checkBucket(t *testing.T, tmpl *cloudformation.Template) {
	b, err := tmpl.GetS3BucketWithName("CasBucket")
	if err != nil {
		t.Fatal(err)
	}
	pab := b.PublicAccessBlockConfiguration
	if pab == nil || !isTrue(pab.BlockPublicAcls) || !isTrue(pab.BlockPublicPolicy) || !isTrue(pab.IgnorePublicAcls) || !isTrue(pab.RestrictPublicBuckets) {
		t.Error("CasBucket must block every kind of public access")
	}
	if b.BucketEncryption == nil || len(b.BucketEncryption.ServerSideEncryptionConfiguration) == 0 {
		t.Error("CasBucket has no default encryption")
	}
	var aborts bool
	if b.LifecycleConfiguration != nil {
		for _, r := range b.LifecycleConfiguration.Rules {
			if r.Status == "Enabled" && r.AbortIncompleteMultipartUpload != nil {
				aborts = true
			}
			if r.ExpirationInDays != nil && (r.Prefix == nil || strings.HasPrefix(*r.Prefix, "sha256")) {
				t.Errorf("lifecycle rule %v would expire referenced blobs", r.Id)
			}
		}
	}
	if !aborts {
		t.Error("CasBucket has no enabled rule aborting incomplete multipart uploads")
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkDatabase: Aurora Serverless v2 with minimum capacity 0, or an RDS
// instance; RDS Proxy in front unless turned off; credentials from the
// template's secret; migrations by the custom resource, which every other
// function waits for.
func checkDatabase(t *testing.T, tmpl *cloudformation.Template, generic map[string]any, overrides map[string]any) {
	res, _ := generic["Resources"].(map[string]any)
	if min := dig(res, "AuroraCluster", "Properties", "ServerlessV2ScalingConfiguration", "MinCapacity"); fmt.Sprint(min) != "0" {
		t.Errorf("Aurora MinCapacity = %v, want 0", min)
	}
	for _, id := range []string{"AuroraCluster", "DatabaseInstance"} {
		if p := dig(res, id, "Properties", "MasterUserPassword"); !strings.Contains(fmt.Sprint(p), "{{resolve:secretsmanager:${DatabaseSecret}") {
			t.Errorf("%s password must be resolved from DatabaseSecret, is %v", id, p)
		}
		if fmt.Sprint(dig(res, id, "Properties", "StorageEncrypted")) != "true" {
			t.Errorf("%s storage is not encrypted", id)
		}
	}
	if a := dig(res, "DatabaseProxy", "Properties", "Auth"); !strings.Contains(fmt.Sprint(a), "ref:DatabaseSecret") {
		t.Errorf("DatabaseProxy must authenticate with DatabaseSecret, has %v", a)
	}
	host := fmt.Sprint(dig(generic, "Globals", "Function", "Environment", "Variables", "FORGECI_DATABASE_HOST"))
	wantHost := "getatt:AuroraCluster.Endpoint.Address"
	switch {
	case overrides["UseRdsProxy"] == "true":
		wantHost = "getatt:DatabaseProxy.Endpoint"
	case overrides["DatabaseEngine"] == "rds-instance":
		wantHost = "getatt:DatabaseInstance.Endpoint.Address"
	}
	if host != wantHost {
		t.Errorf("FORGECI_DATABASE_HOST = %s, want %s", host, wantHost)
	}
	mig, ok := tmpl.Resources["Migrations"].(*cloudformation.CustomResource)
	if !ok {
		t.Fatal("no Migrations custom resource")
	}
	if mig.Properties["ServiceToken"] != "getatt:MigrateFunction.Arn" {
		t.Errorf("Migrations ServiceToken = %v, want !GetAtt MigrateFunction.Arn", mig.Properties["ServiceToken"])
	}
	if mig.Properties["CodeVersion"] != "ref:MigrateFunction.Version" {
		t.Error("Migrations must change with the migrate function's version (CodeVersion: !Ref MigrateFunction.Version), or new migrations never run")
	}
	for id, fn := range tmpl.GetAllServerlessFunctionResources() {
		if id != "MigrateFunction" && !slices.Contains(fn.AWSCloudFormationDependsOn, "Migrations") {
			t.Errorf("%s must DependsOn Migrations", id)
		}
	}
}

// TestCfnLint runs cfn-lint (AWS's CloudFormation linter, which applies the
// SAM transform first and checks every resource against the CloudFormation
// schemas, dependency cycles included) when it is installed.
func TestCfnLint(t *testing.T) {
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Skip("cfn-lint is not installed (pip install cfn-lint); the goformation checks still ran")
	}
	cmd := exec.Command(bin, "template.yaml", "infra/runner-ec2.yaml")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cfn-lint: %v\n%s", err, out)
	}
}

// checkNetwork: both VPC shapes get an S3 gateway endpoint, with no policy
// narrower than the functions' roles (CloudFormation's response bucket goes
// through it too); the migrate function waits for the new VPC's routes.
func checkNetwork(t *testing.T, tmpl *cloudformation.Template, generic map[string]any, overrides map[string]any) {
	res, _ := generic["Resources"].(map[string]any)
	for _, id := range []string{"S3Endpoint", "ExistingVpcS3Endpoint"} {
		if dig(res, id, "Properties", "VpcEndpointType") != "Gateway" || !strings.Contains(fmt.Sprint(dig(res, id, "Properties", "ServiceName")), ".s3") {
			t.Errorf("%s must be an S3 gateway endpoint", id)
		}
		if dig(res, id, "Properties", "PolicyDocument") != nil {
			t.Errorf("%s has an endpoint policy: it would refuse the custom resource's answer to CloudFormation", id)
		}
	}
	mig := tmpl.GetAllServerlessFunctionResources()["MigrateFunction"]
	if mig == nil {
		t.Fatal("no MigrateFunction")
	}
	waits := []string{"ref:PublicDefaultRoute", "ref:PublicSubnetRoutes", "ref:PublicSubnetBRoutes"}
	if inVpc(overrides) {
		waits = []string{"ref:PrivateDefaultRoute", "ref:PrivateSubnetARoutes", "ref:PrivateSubnetBRoutes", "ref:S3Endpoint"}
	}
	if n := functionEnv(mig)["FORGECI_NETWORK"]; n != "existing" {
		for _, want := range waits {
			if !strings.Contains(n, want) {
				t.Errorf("MigrateFunction does not wait for %s (FORGECI_NETWORK=%s)", want, n)
			}
		}
	}
}

// idleBilled are the resource types billed by the hour or month whether
// used or not, and what each costs in the default shape (infra/costs
// prices them; the rest are billed per request).
var idleBilled = map[string]bool{
	"AWS::EC2::NatGateway": true, "AWS::RDS::DBProxy": true, "AWS::EC2::VPCEndpoint": true,
	"AWS::SecretsManager::Secret": true, "AWS::KMS::Key": true, "AWS::RDS::DBInstance": true, "AWS::EC2::EIP": true,
}

// rawTemplate is the template unprocessed, its parameters' defaults
// overridden (what evalCondition reads).
func rawTemplate(t *testing.T, overrides map[string]any) map[string]any {
	raw, err := os.ReadFile(root + "template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := intrinsics.ProcessYAML(raw, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range overrides {
		if p, ok := dig(m, "Parameters", k).(map[string]any); ok {
			p["Default"] = v
		}
	}
	return m
}

// idleResources counts the default shape's idle-billed resources by type, a
// DBInstance counted only when it is not Aurora Serverless (which pauses).
func idleResources(t *testing.T, generic map[string]any, overrides map[string]any) map[string]int {
	out := map[string]int{}
	res, _ := generic["Resources"].(map[string]any)
	tmpl := rawTemplate(t, overrides)
	for _, r := range res {
		typ := fmt.Sprint(dig(r, "Type"))
		if !idleBilled[typ] {
			continue
		}
		if c, ok := dig(r, "Condition").(string); ok && !evalCondition(c, tmpl) {
			continue
		}
		if typ == "AWS::RDS::DBInstance" && dig(r, "Properties", "DBInstanceClass") == "db.serverless" {
			continue
		}
		if typ == "AWS::EC2::VPCEndpoint" && dig(r, "Properties", "VpcEndpointType") == "Gateway" {
			continue // free
		}
		out[typ]++
	}
	return out
}

// checkIdle: the default shape bills nothing by the hour but the key that
// seals project secrets and the database's credentials: no NAT gateway,
// no proxy, no paid endpoint, an Aurora writer that pauses at 0 after 5
// minutes, sessions ended when idle, TLS required, IAM authentication.
func checkIdle(t *testing.T, generic map[string]any, overrides map[string]any) {
	res, _ := generic["Resources"].(map[string]any)
	if overrides == nil {
		got := idleResources(t, generic, overrides)
		want := map[string]int{"AWS::KMS::Key": 1, "AWS::SecretsManager::Secret": 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the default shape's idle-billed resources are %v, want %v", got, want)
		}
		if fmt.Sprint(dig(res, "AuroraCluster", "Properties", "ServerlessV2ScalingConfiguration", "SecondsUntilAutoPause")) != "300" {
			t.Error("Aurora does not auto-pause after 300 s")
		}
		if fmt.Sprint(dig(res, "AuroraInstance", "Properties", "PubliclyAccessible")) != "true" {
			t.Error("the default shape's database is not reachable by the functions outside the VPC")
		}
		// Each of a key's first two rotations is billed as another key:
		// infra/costs prices one key (RotateSecretsKey prices the rest).
		if got := fmt.Sprint(dig(res, "SecretsKey", "Properties", "EnableKeyRotation")); got != "false" {
			t.Errorf("the default shape's secrets key rotates (%s): the idle table prices one key version", got)
		}
	}
	if overrides["RotateSecretsKey"] == "true" && fmt.Sprint(dig(res, "SecretsKey", "Properties", "EnableKeyRotation")) != "true" {
		t.Error("RotateSecretsKey=true does not rotate the secrets key")
	}
	for _, id := range []string{"AuroraCluster", "DatabaseInstance"} {
		if fmt.Sprint(dig(res, id, "Properties", "EnableIAMDatabaseAuthentication")) != "true" {
			t.Errorf("%s: IAM database authentication is off", id)
		}
	}
	params := fmt.Sprint(dig(res, "DatabaseParameterGroup", "Properties", "Parameters"))
	if !strings.Contains(params, "idle_session_timeout:10000") {
		t.Errorf("the database does not end idle sessions (idle_session_timeout): %s", params)
	}
	if !strings.Contains(params, "DateStyle:ISO, MDY") {
		t.Errorf("the database's DateStyle is not pinned to ISO, which exec-mode statements read times in: %s", params)
	}
	cluster := fmt.Sprint(dig(res, "AuroraClusterParameterGroup", "Properties", "Parameters"))
	if !strings.Contains(cluster, "rds.force_ssl:1") {
		t.Errorf("Aurora does not require TLS: %s", cluster)
	}
	if !inVpc(overrides) && overrides["DatabaseEngine"] == "rds-instance" && !strings.Contains(params, "rds.force_ssl:1") {
		t.Errorf("the instance does not require TLS: %s", params)
	}
}
