package expr_test

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/expr"
)

func testContext() *expr.Context {
	var vars map[string]any
	_ = json.Unmarshal([]byte(`{
		"forgeci": {"ref": "refs/heads/main", "ref_name": "main", "sha": "abc123", "event_name": "push", "actor": "octocat", "run_number": 7},
		"env": {"NAME": "World", "EMPTY": ""},
		"matrix": {"os": "linux", "go": "1.22", "node": 20},
		"steps": {"v": {"outputs": {"version": "1.2.3"}, "outcome": "success"}},
		"needs": {"build": {"result": "success", "outputs": {"artifact": "app.tar"}}},
		"event": {"commits": [{"message": "fix: a"}, {"message": "feat: b"}, {"id": 3}], "labels": {"x": {"name": "bug"}, "y": {"name": "ui"}}},
		"list": ["a", "B", 3, true, null],
		"json": "{\"n\": 1, \"s\": [1, 2]}"
	}`), &vars)
	vars["github"] = vars["forgeci"]
	return &expr.Context{Vars: vars}
}

func eval(t *testing.T, src string, c *expr.Context) any {
	t.Helper()
	e, err := expr.Parse(src)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	v, everr := e.Eval(c)
	if everr != nil {
		t.Fatalf("eval %q: %v", src, everr)
	}
	return v
}

// TestEval: literals, contexts, operators with GitHub's loose equality and
// truthiness, and every function, GitHub's documented examples included.
func TestEval(t *testing.T) {
	c := testContext()
	for _, tc := range []struct {
		src  string
		want any
	}{
		// Literals (GitHub's docs: null, booleans, numbers, strings).
		{"null", nil}, {"true", true}, {"711", 711.0}, {"-9.2", -9.2}, {"0xff", 255.0}, {"-2.99e-2", -0.0299},
		{"'Mona the Octocat'", "Mona the Octocat"}, {"'It''s open source!'", "It's open source!"},
		// Contexts, case-insensitive, missing is null.
		{"forgeci.ref", "refs/heads/main"}, {"github.sha", "abc123"}, {"GitHub.Event_Name", "push"},
		{"env.NAME", "World"}, {"matrix.os", "linux"}, {"steps.v.outputs.version", "1.2.3"},
		{"needs.build.outputs.artifact", "app.tar"}, {"needs.build.result", "success"},
		{"env.MISSING", nil}, {"nothing.at.all", nil}, {"matrix['os']", "linux"}, {"list[1]", "B"}, {"list[9]", nil},
		// Object filters.
		{"join(event.commits.*.message, '|')", "fix: a|feat: b"}, {"join(event.labels.*.name)", "bug,ui"},
		{"contains(event.labels.*.name, 'BUG')", true}, {"list.foo", nil},
		// Loose equality (GitHub's table: types differ, both become numbers).
		{"'abc' == 'ABC'", true}, {"null == 0", true}, {"true == 1", true}, {"'' == 0", true}, {"'1' == 1", true},
		{"'0x10' == 16", true}, {"'a' == 0", false}, {"matrix.node == '20'", true}, {"false == ''", true},
		{"null != false", false}, {"list == list", true}, {"fromJSON('[]') == fromJSON('[]')", false},
		// Comparisons; NaN compares false.
		{"1 < 2", true}, {"'b' > 'A'", true}, {"'10' > 9", true}, {"'a' < 1", false}, {"'a' >= 1", false}, {"2 <= 2", true},
		// Truthiness and the logical operators, which answer an operand.
		{"!''", true}, {"!0", true}, {"!'0'", false}, {"!list", false}, {"env.EMPTY || 'default'", "default"},
		{"env.NAME && 'yes'", "yes"}, {"0 && 'no'", 0.0}, {"matrix.os == 'linux' && 'penguin' || 'other'", "penguin"},
		{"(1 == 2 || 3 == 3) && !(4 == 5)", true},
		// Functions, as GitHub's docs show them.
		{"contains('Hello world', 'llo')", true}, {"contains(list, 'b')", true}, {"contains(list, 3)", true},
		{"contains(list, 'z')", false}, {"startsWith('Hello world', 'He')", true}, {"endsWith('Hello world', 'LD')", true},
		{"format('Hello {0} {1} {2}', 'Mona', 'the', 'Octocat')", "Hello Mona the Octocat"},
		{"format('{{Hello {0} {1} {2}!}}', 'Mona', 'the', 'Octocat')", "{Hello Mona the Octocat!}"},
		{"join(list)", "a,B,3,true,"}, {"join(list, ', ')", "a, B, 3, true, "}, {"join('abc', '-')", "abc"},
		{"toJSON(matrix.go)", `"1.22"`}, {"fromJSON(json).n", 1.0}, {"fromJSON(json).s[1]", 2.0}, {"fromJSON('true')", true},
		{"format('{0}', 1.50)", "1.5"}, {"format('{0}{1}', null, false)", "false"},
		// Status functions without a run state: success and always.
		{"success()", true}, {"always()", true}, {"failure()", false}, {"cancelled()", false},
	} {
		got := eval(t, tc.src, c)
		if g, ok := got.(float64); ok && math.IsNaN(g) {
			t.Errorf("%s = NaN", tc.src)
			continue
		}
		if gj, wj := mustJSON(got), mustJSON(tc.want); gj != wj {
			t.Errorf("%s = %s, want %s", tc.src, gj, wj)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestToJSON: toJSON pretty-prints with two spaces, as GitHub's does.
func TestToJSON(t *testing.T) {
	if got := eval(t, "toJSON(needs.build)", testContext()); got != "{\n  \"outputs\": {\n    \"artifact\": \"app.tar\"\n  },\n  \"result\": \"success\"\n}" {
		t.Fatalf("toJSON = %q", got)
	}
}

// TestStatus: the status functions read the run's state through Status;
// CallsStatus finds them.
func TestStatus(t *testing.T) {
	c := testContext()
	c.Status = func(name string) bool { return name == "failure" || name == "always" }
	if eval(t, "failure() && needs.build.result == 'success'", c) != true || eval(t, "success()", c) != false {
		t.Fatal("status functions do not read Status")
	}
	for src, want := range map[string]bool{"always()": true, "github.ref == 'x' || failure()": true, "success() && x": true,
		"x == 'always()'": false, "contains(x, 'y')": false} {
		e, err := expr.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if e.CallsStatus() != want {
			t.Errorf("CallsStatus(%s) = %v", src, !want)
		}
	}
}

// TestErrors: parse and check errors are located and say what is wrong.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"github.ref ==", "unexpected end of input"},
		{"nope(1)", "unknown function nope()"},
		{"contains('a')", "contains() takes 2 arguments, not 1"},
		{"success(1)", "success() takes 0 arguments, not 1"},
		{"'unterminated", "end of string literal"},
		{"1 +  2", "unexpected character"},
		{"format('{0}{1}', 'a')", "{1} names no argument"},
		{"fromJSON('{x')", "not JSON"},
		{"hashFiles('*.go')", "only available in a job's steps"},
	} {
		e, err := expr.Parse(tc.src)
		if err == nil {
			_, everr := e.Eval(testContext())
			if everr != nil {
				err = everr.(*expr.Error)
			}
		}
		if err == nil || !strings.Contains(strings.ToLower(err.Message), strings.ToLower(tc.want)) {
			t.Errorf("%s: got %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
	e, _ := expr.Parse("github.ref == 'x'")
	if err := e.Allow("matrix", "needs"); err == nil || err.Offset != 0 || !strings.Contains(err.Message, `"github"`) {
		t.Fatalf("Allow without github: %v", err)
	}
}

// TestTemplate: ${{ }} in text, with braces inside strings, several per
// string, a whole-string expression, and every error located.
func TestTemplate(t *testing.T) {
	c := testContext()
	tpl, errs := expr.ParseTemplate("go ${{ matrix.go }} on ${{ matrix.os }}: ${{ format('{{{0}}}', 'x}}') }}")
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	got, err := tpl.Eval(c)
	if err != nil || got != "go 1.22 on linux: {x}}}" {
		t.Fatalf("template = %q, %v", got, err)
	}
	whole, _ := expr.ParseTemplate(" ${{ matrix.node }} ")
	if !whole.IsExpr() || tpl.IsExpr() {
		t.Fatal("IsExpr")
	}
	src := "a ${{ nope() }} b ${{ contains(1) }} c ${{ x"
	_, errs = expr.ParseTemplate(src)
	if len(errs) != 3 {
		t.Fatalf("want 3 errors, got %v", errs)
	}
	for i, want := range []int{strings.Index(src, "nope"), strings.Index(src, "contains"), len(src)} {
		if errs[i].Offset != want {
			t.Errorf("error %d (%s) at %d, want %d", i, errs[i].Message, errs[i].Offset, want)
		}
	}
}

// TestBounded: a result that would double at each level stops at the
// bound with an error.
func TestBounded(t *testing.T) {
	src := "'0123456789abcdef'"
	for range 20 {
		src = "format('{0}{0}', " + src + ")"
	}
	e, perr := expr.Parse(src)
	if perr != nil {
		t.Fatal(perr)
	}
	if _, err := e.Eval(testContext()); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("a 16 MiB result: %v", err)
	}
}

// TestHostileWork: an expression over large values stops at the work
// budget or the result bound, quickly, instead of building gigabytes or
// running for minutes (both were found by attacking the runner's if:).
// Quickly is in the process's CPU time (the package's tests run one at a
// time): on a machine busy with other packages' tests, wall time measured
// the machine (7.8 s once under -race in CI, 2.4 s alone).
func TestHostileWork(t *testing.T) {
	big := strings.Repeat("\x01", 1<<20)
	steps := map[string]any{}
	for i := range 100 {
		steps[fmt.Sprintf("s%d", i)] = map[string]any{"outputs": map[string]any{"o": big}}
	}
	arr := "[" + strings.Repeat("0,", 1<<19-16) + "0]" // just under the 1 MiB input bound
	c := &expr.Context{Vars: map[string]any{"steps": steps, "a": arr}}
	slow := strings.TrimSuffix(strings.Repeat("fromJSON(a)[1] || ", 1800), " || ")
	for _, src := range []string{"toJSON(steps)", slow} {
		e, perr := expr.Parse(src)
		if perr != nil {
			t.Fatal(perr)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := cpuTime(t)
		_, err := e.Eval(c)
		d := cpuTime(t) - start
		runtime.ReadMemStats(&after)
		if err == nil || d > 5*time.Second || after.TotalAlloc-before.TotalAlloc > 256<<20 {
			t.Fatalf("%.40s...: %v after %v of CPU and %d MB", src, err, d, (after.TotalAlloc-before.TotalAlloc)>>20)
		}
	}
}

// cpuTime is the CPU time the test process has used, its threads and
// garbage collector included.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
