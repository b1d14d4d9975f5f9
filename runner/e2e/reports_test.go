package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// reportsYAML is a job whose tests fail: its JUnit report is read all
// the same, and a link it plants to a file outside the workspace is not.
const reportsYAML = `jobs:
  unit:
    runs-on: linux
    reports: {junit: ['reports/**/*.xml', 'escape.xml']}
    steps:
      - run: |
          mkdir -p reports/go
          cat > reports/go/junit.xml <<'XML'
          <?xml version="1.0" encoding="UTF-8"?>
          <testsuites><testsuite name="calc">
            <testcase classname="calc" name="TestAdd" time="0.01"/>
            <testcase classname="calc" name="TestSub" time="0.02" file="calc/sub_test.go" line="7"><failure message="want 1, got 2">sub_test.go:7: want 1, got 2</failure></testcase>
            <testcase classname="calc" name="TestMul"><skipped/></testcase>
          </testsuite></testsuites>
          XML
          ln -s /etc/shadow escape.xml
          echo tests failed; exit 1
`

// testReports: with a real runner, a failing job's JUnit report is
// summed up (API, CLI), its files kept as the test-reports artifact, and
// a link out of the workspace is not read.
func testReports(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		id, err := s.submit(writePipeline(t, reportsYAML), false)
		if err != nil {
			t.Fatal(err)
		}
		v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" }, 60*time.Second)
		job := v.Jobs[0].ID
		rep := s.apiCall("GET", "/v1/runs/"+id+"/jobs/"+job+"/report", s.vals["FORGECI_TOKEN"], nil, 200)
		if rep["files"] != 1.0 || rep["tests"] != 3.0 || rep["passed"] != 1.0 || rep["failed"] != 1.0 || rep["skipped"] != 1.0 {
			t.Fatalf("report %v", rep)
		}
		f := rep["failures"].([]any)[0].(map[string]any)
		if f["name"] != "TestSub" || f["class"] != "calc" || f["message"] != "want 1, got 2" || f["file"] != "calc/sub_test.go" || f["line"] != 7.0 {
			t.Fatalf("failure %v", f)
		}
		if log := s.log(id, job); !strings.Contains(log, "==> tests: 1 passed, 1 failed, 0 errored, 1 skipped (1 report files)") {
			t.Fatalf("log:\n%s", log)
		}
		arts := s.apiCall("GET", "/v1/runs/"+id+"/artifacts", s.vals["FORGECI_TOKEN"], nil, 200)
		if b, _ := json.Marshal(arts); !strings.Contains(string(b), `"test-reports"`) {
			t.Fatalf("artifacts %v", arts)
		}
		out, err := s.cli("tests", id, "unit")
		if err == nil || !strings.Contains(out, "3 tests: 1 passed, 1 failed, 0 errored, 1 skipped") ||
			!strings.Contains(out, "FAILURE calc.TestSub at calc/sub_test.go:7\n  want 1, got 2") {
			t.Fatalf("forgeci tests (%v):\n%s", err, out)
		}
		if out, _ := s.cli("runs", id); !strings.Contains(out, "1 passed, 1 failed") {
			t.Fatalf("forgeci runs:\n%s", out)
		}
	}
}
