package pipeline_test

import (
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

func TestJobLimits(t *testing.T) {
	p, err := pipeline.Parse("p.yml", []byte("jobs:\n  a:\n    limits: {memory: 1.5G, processes: 512, cpus: 0.5}\n    steps: [{run: 'true'}]\n  b:\n    steps: [{run: 'true'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := domain.JobLimits{MemoryBytes: 3 << 29, Processes: 512, CPUs: 0.5}
	if got := p.Jobs[0].Spec.Limits; got == nil || *got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
	if p.Jobs[1].Spec.Limits != nil {
		t.Fatalf("a job without limits: has %+v", p.Jobs[1].Spec.Limits)
	}
	for _, bad := range []struct{ src, want string }{
		{"memory: 1K", "at least 16M"},
		{"memory: lots", "such as 512M"},
		{"memory: NaNG", "such as 512M"},
		{"processes: 2", "between 8 and"},
		{"cpus: 0", "from 0.01 to 1024"},
		{"cpus: many", "from 0.01 to 1024"},
		{"disk: 1G", `unknown key "disk"`},
	} {
		_, err := pipeline.Parse("p.yml", []byte("jobs:\n  a:\n    limits: {"+bad.src+"}\n    steps: [{run: 'true'}]\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "jobs.a.limits") {
			t.Errorf("limits {%s}: %v, want %q at jobs.a.limits", bad.src, err, bad.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"512M": 512 << 20, "4G": 4 << 30, "1.5g": 3 << 29, "1073741824": 1 << 30, "2K": 2048} {
		if got, err := domain.ParseBytes(in); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1G", "0", "1.5", "NaN", "NaNG", "InfT", "2E", "9999999T"} {
		if got, err := domain.ParseBytes(in); err == nil {
			t.Errorf("%q parsed as %d", in, got)
		}
	}
}

func TestPathsStayInside(t *testing.T) {
	for _, bad := range []string{"./..", ".//..", "a/../..", "x/..", ".", "/etc", "../x", "a/../../b"} {
		src := "jobs:\n  a:\n    steps: [{run: 'true'}]\n    artifacts: [{name: out, paths: ['" + bad + "']}]\n"
		if _, err := pipeline.Parse("p.yml", []byte(src)); err == nil || !strings.Contains(err.Error(), "inside the workspace") {
			t.Errorf("artifact path %q: %v", bad, err)
		}
	}
	for _, good := range []string{"dist/", "a/../b", "./out", "deep/er/file.txt"} {
		src := "jobs:\n  a:\n    steps: [{run: 'true'}]\n    cache: {key: k, paths: ['" + good + "']}\n"
		if _, err := pipeline.Parse("p.yml", []byte(src)); err != nil {
			t.Errorf("cache path %q: %v", good, err)
		}
	}
}
