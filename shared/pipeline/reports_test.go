package pipeline_test

import (
	"slices"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestReports: reports: {junit: [globs]} names a job's JUnit files; the
// job then needs a runner with the reports feature.
func TestReports(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte("jobs:\n  test:\n    steps: [{run: go test}]\n    reports: {junit: ['reports/*.xml', '**/TEST-*.xml']}\n"))
	if err != nil {
		t.Fatal(err)
	}
	j := p.Jobs[0]
	if j.Spec.Reports == nil || !slices.Equal(j.Spec.Reports.JUnit, []string{"reports/*.xml", "**/TEST-*.xml"}) {
		t.Fatalf("reports %+v", j.Spec.Reports)
	}
	if !slices.Contains(j.Spec.Features(), domain.FeatureReports) {
		t.Fatalf("features %v", j.Spec.Features())
	}
	refuses(t, "jobs:\n  a:\n    steps: [{run: x}]\n    %s\n", map[string]string{
		"reports: {junit: []}":                          "junit is a list of 1 to 20 patterns",
		"reports: {junit: ['/etc/*.xml']}":              `pattern "/etc/*.xml" must be`,
		"reports: {junit: ['../up.xml']}":               `pattern "../up.xml" must be`,
		"reports: {junit: ['a/[b.xml']}":                `pattern "a/[b.xml" must be a valid glob`,
		"reports: {xunit: [a.xml]}":                     `unknown key "xunit"`,
		"artifacts: [{name: test-reports, paths: [x]}]": "is the test reports'",
	})
}

// TestEnvFilesFeature: a job whose script names $GITHUB_ENV,
// $GITHUB_PATH, $GITHUB_STEP_SUMMARY or ForgeCI's names for them needs a
// runner with the env-files feature; a job that names none does not.
func TestEnvFilesFeature(t *testing.T) {
	for script, want := range map[string]bool{
		`echo "A=1" >> "$GITHUB_ENV"`:           true,
		`echo /opt/bin >> $GITHUB_PATH`:         true,
		`echo "A=1" >> "${FORGECI_ENV}"`:        true,
		`echo /opt/bin >> "$FORGECI_PATH"`:      true,
		`echo "$GITHUB_OUTPUT" && make`:         false,
		`echo "# done" >> $GITHUB_STEP_SUMMARY`: true,
	} {
		p, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    steps:\n      - run: make\n      - run: '"+script+"'\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(p.Jobs[0].Spec.Features(), domain.FeatureEnvFiles); got != want {
			t.Errorf("%s: needs env-files %v, want %v (%v)", script, got, want, p.Jobs[0].Spec.Features())
		}
	}
}

// TestEnvReservedNames: a pipeline's env may not set its steps' files'
// variables or FORGECI_*, nor a variable bash holds read-only, at any
// level.
func TestEnvReservedNames(t *testing.T) {
	for _, level := range []string{"env: {%s: x}\njobs:\n  a:\n    steps: [{run: make}]\n",
		"jobs:\n  a:\n    env: {%s: x}\n    steps: [{run: make}]\n",
		"jobs:\n  a:\n    steps: [{run: make, env: {%s: x}}]\n"} {
		refuses(t, level, map[string]string{
			"GITHUB_ENV":     "GITHUB_ENV names a file of each step",
			"FORGECI_RUN_ID": "names starting with FORGECI_ are reserved",
			"SHELLOPTS":      "SHELLOPTS is read-only in bash",
		})
	}
	// GitHub's default variables may be set, as GitHub's: the runner's
	// value wins (and its log says so).
	if _, err := pipeline.Parse("f.yml", []byte("env: {GITHUB_TOKEN: x, HOME: /h, GITHUB_SHA: x, RUNNER_TEMP: /t, GITHUB_REPOSITORY: a/b}\njobs:\n  a:\n    steps: [{run: make}]\n")); err != nil {
		t.Fatalf("names the runner does not set: %v", err)
	}
}
