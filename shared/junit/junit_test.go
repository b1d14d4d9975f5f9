package junit_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/junit"
)

const pytestReport = `<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5" time="0.42">
<testcase classname="tests.test_calc" name="test_add" file="tests/test_calc.py" line="3" time="0.01"/>
<testcase classname="tests.test_calc" name="test_div" file="tests/test_calc.py" line="9" time="0.02">
  <failure message="assert 1 == 2">def test_div():
&gt;       assert 1 == 2
E       assert 1 == 2</failure></testcase>
<testcase classname="tests.test_calc" name="test_boom" time="0.01"><error message="RuntimeError: boom">Traceback</error></testcase>
<testcase classname="tests.test_calc" name="test_later" time="0"><skipped message="not yet"/></testcase>
<testcase classname="tests.test_calc" name="test_ok" time="0.1"><system-out>noise</system-out></testcase>
</testsuite></testsuites>`

// go-junit-report's shape: a bare testsuite, failures with text only.
const goReport = `<testsuite tests="2" failures="1" time="1.5" name="example.com/pkg">
<properties><property name="go.version" value="go1.26"></property></properties>
<testcase classname="pkg" name="TestA" time="0.5"></testcase>
<testcase classname="pkg" name="TestB" time="1.0"><failure message="Failed" type="">b_test.go:12: want 2, got 3</failure></testcase>
</testsuite>`

// TestParse: real reports of pytest and go-junit-report, counted from
// their test cases (not their attributes), each failure with what it
// says.
func TestParse(t *testing.T) {
	r, err := junit.Parse(strings.NewReader(pytestReport))
	if err != nil {
		t.Fatal(err)
	}
	if r.Tests != 5 || r.Passed != 2 || r.Failed != 1 || r.Errored != 1 || r.Skipped != 1 || len(r.Failures) != 2 {
		t.Fatalf("pytest: %+v", r)
	}
	f := r.Failures[0]
	if f.Name != "test_div" || f.Kind != "failure" || f.Message != "assert 1 == 2" || f.File != "tests/test_calc.py" || f.Line != 9 ||
		!strings.Contains(f.Text, "> ") || f.Suite != "pytest" {
		t.Fatalf("failure %+v", f)
	}
	if r.Failures[1].Kind != "error" || r.Failures[1].Message != "RuntimeError: boom" {
		t.Fatalf("error %+v", r.Failures[1])
	}
	g, err := junit.Parse(strings.NewReader(goReport))
	if err != nil || g.Tests != 2 || g.Failed != 1 || g.Failures[0].Text != "b_test.go:12: want 2, got 3" || g.Seconds != 1.5 {
		t.Fatalf("go: %+v %v", g, err)
	}
}

// TestParseRefuses: what is not a JUnit report, or is hostile, is a clear
// error, in bounded time.
func TestParseRefuses(t *testing.T) {
	deep := strings.Repeat("<testsuite>", 40) + strings.Repeat("</testsuite>", 40)
	lol := `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]><testsuite><testcase name="&lol2;"/></testsuite>`
	for name, tc := range map[string]struct{ doc, want string }{
		"html":       {"<html><body/></html>", "not a JUnit report"},
		"empty":      {"", "not a JUnit report"},
		"truncated":  {"<testsuite><testcase name='a'>", "XML"},
		"deep":       {deep, "nest deeper than 32"},
		"entities":   {lol, "DTD"},
		"not closed": {"<testsuites><testsuite></testsuites>", "XML"},
	} {
		if _, err := junit.Parse(strings.NewReader(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	big := "<testsuite>" + strings.Repeat("<testcase name='x'/>", junit.MaxReportBytes/20) + "</testsuite>"
	if _, err := junit.Parse(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("a report over the limit: %v", err)
	}
}

// FuzzParse reads any bytes as a report. Oracle: no panic; the counts
// agree (every test case is passed, failed, errored or skipped, and
// failures are kept up to their limit); a report of at most 64 KiB takes
// under 200 ms and 32 MB.
func FuzzParse(f *testing.F) {
	for _, s := range []string{pytestReport, goReport, "<testsuites/>", "<testsuite><testsuite><testcase/></testsuite></testsuite>",
		"<testsuite><testcase><failure>x<b>y</b>z</failure><error/></testcase></testsuite>"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if len(doc) > 64<<10 {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		r, err := junit.Parse(strings.NewReader(string(doc)))
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; d > 200*time.Millisecond || alloc > 32<<20 {
			t.Fatalf("%d bytes: %v and %d MB", len(doc), d, alloc>>20)
		}
		if err != nil {
			return
		}
		if r.Tests != r.Passed+r.Failed+r.Errored+r.Skipped || (!r.Truncated && len(r.Failures) != r.Failed+r.Errored) {
			t.Fatalf("counts disagree: %+v", r)
		}
	})
}
