package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// checkCmd parses a pipeline file here, with the parser the control plane
// uses, so that a workflow being moved from GitHub Actions can be made to
// parse without a server: each problem located, or the jobs it makes.
func checkCmd(g *global) *cobra.Command {
	return &cobra.Command{
		Use: "check [FILE|DIR|-]",
		Short: "Check a pipeline file offline, as the server would parse it (default ./" + pipeline.FileName +
			", - for standard input): each problem with its line, or the jobs it makes; exit 1 on problems",
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := pipeline.FileName
			if len(args) == 1 {
				path = args[0]
			}
			if path == "-" {
				src, err := readPipeline(c.InOrStdin(), "standard input")
				if err != nil {
					return statusError{err, 2}
				}
				return checkSource(g, "<stdin>", src, false)
			}
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				path = filepath.Join(path, pipeline.FileName)
			}
			src, err := readPipelineFile(path)
			if err != nil {
				return statusError{err, 2}
			}
			return checkSource(g, path, src, true)
		},
	}
}

// checkedJob is a job as check shows it.
type checkedJob struct {
	Name     string   `json:"name"`
	Needs    []string `json:"needs"`
	RunsOn   []string `json:"runs_on"`
	Steps    int      `json:"steps"`
	Features []string `json:"runner_features"`
}

// readPipelineFile reads the pipeline file at path, refusing what the
// server would not read.
func readPipelineFile(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no pipeline file at %s: name the file, or the directory holding its %s", path, pipeline.FileName)
	}
	if err != nil {
		return nil, err
	}
	// As the server: a snapshot keeps a link as a link, and the pipeline
	// must be a file (a device or a pipe could also never end).
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): the server reads %s only as one", path, fi.Mode().Type(), pipeline.FileName)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readPipeline(f, path)
}

// readPipeline reads no more than a pipeline may hold (a file may have
// grown meanwhile; standard input may never end).
func readPipeline(r io.Reader, name string) ([]byte, error) {
	src, err := io.ReadAll(io.LimitReader(r, pipeline.MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(src) > pipeline.MaxFileBytes {
		return nil, fmt.Errorf("%s is over the limit of %d bytes", name, pipeline.MaxFileBytes)
	}
	return src, nil
}

// checkSource parses src, named path in what it prints; gitFile says path
// is a file of this machine's, which git may not track.
func checkSource(g *global, path string, src []byte, gitFile bool) error {
	p, err := pipeline.Parse(path, src)
	var errs pipeline.Errors
	if errors.As(err, &errs) {
		return reportProblems(g, path, errs)
	}
	if err != nil {
		return err
	}
	if gitFile {
		warnUntracked(path)
	}
	jobs := make([]checkedJob, 0, len(p.Jobs))
	for _, j := range p.Jobs {
		jobs = append(jobs, checkedJob{Name: j.Name, Needs: orNone(j.Needs), RunsOn: orNone(j.Labels),
			Steps: len(j.Spec.Steps), Features: orNone(j.Spec.Features())})
	}
	if !g.json {
		printf("%s: ok, %d job(s)\n", cell(path), len(jobs))
	}
	return printTable(g, jobs, "JOB\tNEEDS\tRUNS-ON\tSTEPS\tRUNNER FEATURES", func(j checkedJob) []any {
		return []any{j.Name, strings.Join(j.Needs, ","), strings.Join(j.RunsOn, ","), j.Steps, strings.Join(j.Features, ",")}
	})
}

// reportProblems prints a file's problems, located (on stderr, or on
// stdout as JSON with --json, for an editor or a CI step), and exits 1.
func reportProblems(g *global, path string, errs pipeline.Errors) error {
	if g.json {
		if err := printJSON(errs); err != nil {
			return err
		}
		return exitError(1)
	}
	for _, e := range errs {
		fmt.Fprintln(os.Stderr, plainText(e.Error(), false))
	}
	fmt.Fprintf(os.Stderr, "forgeci: %s: %d problem(s)\n", plainText(path, false), len(errs))
	return exitError(1)
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// warnUntracked says so when the pipeline file is the root's of a git
// checkout and git does not track it: submit takes what git tracks, and
// would say the snapshot has no pipeline file.
func warnUntracked(path string) {
	dir := filepath.Dir(path)
	if filepath.Base(path) != pipeline.FileName || !snapshot.IsGitCheckout(dir) {
		return
	}
	if exec.Command("git", "-C", dir, "ls-files", "--error-unmatch", "--", pipeline.FileName).Run() != nil {
		fmt.Fprintf(os.Stderr, "forgeci: warning: git does not track %s, and forgeci submit takes what git tracks: git add it (or submit --untracked)\n",
			plainText(path, false))
	}
}
