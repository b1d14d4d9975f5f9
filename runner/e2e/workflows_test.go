package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// testWorkflows runs each of testdata/workflows, GitHub starter workflows
// with their uses: steps written as shell, through a real runner, and
// compares every job's end state with the directory's expect.txt.
func testWorkflows(s *stack) func(t *testing.T) {
	return func(t *testing.T) {
		dirs, err := filepath.Glob("testdata/workflows/*")
		if err != nil || len(dirs) == 0 {
			t.Fatalf("no workflows: %v", err)
		}
		for _, dir := range dirs {
			t.Run(filepath.Base(dir), func(t *testing.T) {
				want, err := os.ReadFile(filepath.Join(dir, "expect.txt"))
				if err != nil {
					t.Fatal(err)
				}
				id, err := s.submit(copyTree(t, dir), false)
				if err != nil {
					t.Fatal(err)
				}
				v := s.waitRun(id, func(v runView) bool { return v.State != "PENDING" && v.State != "RUNNING" }, 120*time.Second)
				var got []string
				for name, state := range states(v) {
					got = append(got, name+" "+state)
				}
				sort.Strings(got)
				wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
				sort.Strings(wantLines)
				if g, w := strings.Join(got, "\n"), strings.Join(wantLines, "\n"); g != w {
					var logs strings.Builder
					for _, j := range v.Jobs {
						logs.WriteString("--- " + j.Name + "\n" + s.log(id, j.ID))
					}
					t.Fatalf("jobs:\n%s\nwant:\n%s\nlogs:\n%s", g, w, logs.String())
				}
			})
		}
	}
}

// copyTree copies dir out of the repository, so that submit snapshots it
// alone and not the checkout around it.
func copyTree(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(out, rel), 0o755)
		}
		if rel == "expect.txt" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(out, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
