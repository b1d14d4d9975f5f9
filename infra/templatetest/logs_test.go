package templatetest

import (
	"fmt"
	"strings"
	"testing"
)

// TestFunctionLogsExpire: every function logs to a log group of its own
// that the template makes with the stack's retention (Lambda's own group
// keeps every line for ever), named for the stack so that two stacks'
// groups never meet.
func TestFunctionLogsExpire(t *testing.T) {
	_, generic := parse(t, map[string]any{"LogRetentionDays": "14"})
	resources, _ := dig(generic, "Resources").(map[string]any)
	seen := map[string]string{}
	functions := 0
	for name, r := range resources {
		if dig(r, "Type") != "AWS::Serverless::Function" {
			continue
		}
		functions++
		ref := fmt.Sprint(dig(r, "Properties", "LoggingConfig", "LogGroup"))
		group, ok := strings.CutPrefix(ref, "ref:")
		if !ok {
			t.Errorf("%s logs to %s, not to a log group of the template's", name, ref)
			continue
		}
		if other, dup := seen[group]; dup {
			t.Errorf("%s and %s share the log group %s", name, other, group)
		}
		seen[group] = name
		g := resources[group]
		if dig(g, "Type") != "AWS::Logs::LogGroup" {
			t.Errorf("%s's log group %s is a %v", name, group, dig(g, "Type"))
			continue
		}
		if days := fmt.Sprint(dig(g, "Properties", "RetentionInDays")); days != "14" {
			t.Errorf("%s's logs are kept %s days, want the LogRetentionDays given, 14", name, days)
		}
		if n := fmt.Sprint(dig(g, "Properties", "LogGroupName")); !strings.HasPrefix(n, "sub:/forgeci/${AWS::StackName}/") {
			t.Errorf("%s's log group is named %s, want one under /forgeci/<stack>/", name, n)
		}
	}
	if functions < 18 {
		t.Fatalf("%d functions found", functions)
	}
}
