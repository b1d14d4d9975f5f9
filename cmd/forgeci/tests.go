package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/protocol"
)

// report is a job's test report as the API answers it.
type report struct {
	Generation int `json:"generation"`
	protocol.TestSummary
}

func testsCmd(g *global) *cobra.Command {
	var generation int
	c := command("tests RUN_ID JOB", "Print a job's test report: counts, and each failure with its message and file:line",
		cobra.ExactArgs(2), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
			jobID, err := jobByName(ctx, cl, args[0], args[1])
			if err != nil {
				return err
			}
			var r report
			path := fmt.Sprintf("/v1/runs/%s/jobs/%s/report?generation=%d", url.PathEscape(args[0]), url.PathEscape(jobID), generation)
			if err := cl.do(ctx, "GET", path, nil, &r); err != nil {
				return err
			}
			if g.json {
				return printJSON(r)
			}
			out := logOutput(os.Stdout)
			if ts, ok := out.(*termSafe); ok {
				ts.plain = true
				defer ts.Flush() //nolint:errcheck // stdout's error is printReport's
			}
			if err := printReport(out, r); err != nil {
				return err
			}
			if r.Failed+r.Errored > 0 {
				return exitError(1)
			}
			return nil
		}))
	c.Flags().IntVar(&generation, "generation", 0, "the attempt (default: the current one)")
	return c
}

// printReport prints the counts, then each failure: where, what and why.
// Names, files and messages are a job's text (safeLog keeps a terminal
// from obeying what they hold).
func printReport(out io.Writer, r report) error {
	p := func(format string, a ...any) { fmt.Fprintf(out, format, a...) }
	p("%d tests: %d passed, %d failed, %d errored, %d skipped (%.1fs, %d report files)\n",
		r.Tests, r.Passed, r.Failed, r.Errored, r.Skipped, r.Seconds, r.Files)
	for _, f := range r.Failures {
		name := f.Name
		if f.Class != "" {
			name = f.Class + "." + f.Name
		}
		where := ""
		if f.File != "" {
			where = " at " + f.File
			if f.Line > 0 {
				where += fmt.Sprintf(":%d", f.Line)
			}
		}
		p("\n%s %s%s\n", strings.ToUpper(f.Kind), name, where)
		if f.Message != "" {
			p("  %s\n", strings.ReplaceAll(f.Message, "\n", "\n  "))
		}
	}
	if r.Truncated {
		p("\n(more failures than are kept; see the test-reports artifact)\n")
	}
	return nil
}
