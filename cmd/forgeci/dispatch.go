package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// runCmd is forgeci run: a manual run (on.workflow_dispatch) of the newest
// snapshot submitted for a ref, with inputs.
func runCmd(g *global) *cobra.Command {
	var ref string
	var inputs []string
	var follow bool
	c := command("run PROJECT", "Run a project by hand: its newest snapshot of --ref, with the pipeline's workflow_dispatch inputs (-i name=value)",
		cobra.ExactArgs(1), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
			given := map[string]string{}
			for _, kv := range inputs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("-i %q: an input is name=value", kv)
				}
				given[k] = v
			}
			return dispatchCommand(ctx, cl, g, args[0], ref, given, follow)
		}))
	f := c.Flags()
	f.StringVar(&ref, "ref", "main", "the branch (or refs/heads/..., refs/tags/...) whose newest submitted snapshot runs")
	f.StringArrayVarP(&inputs, "input", "i", nil, "an input of the pipeline's on.workflow_dispatch, name=value (repeatable)")
	f.BoolVarP(&follow, "follow", "f", false, "stream the jobs' logs until the run ends; exit 0 only if it PASSED")
	return c
}

func dispatchCommand(ctx context.Context, cl *apiClient, g *global, project, ref string, inputs map[string]string, follow bool) error {
	var run struct {
		submitResult
		Delivery string `json:"delivery"`
		Note     string `json:"note"`
	}
	if err := cl.do(ctx, "POST", "/v1/projects/"+url.PathEscape(project)+"/dispatch",
		map[string]any{"ref": ref, "inputs": inputs}, &run); err != nil {
		return err
	}
	if run.Delivery != "" {
		if g.json {
			return json.NewEncoder(os.Stdout).Encode(run)
		}
		// A GitHub project: the worker resolves the ref and makes the run.
		printf("queued as delivery %s: %s\n", run.Delivery, run.Note)
		return nil
	}
	if g.json && !follow {
		return json.NewEncoder(os.Stdout).Encode(run)
	}
	printf("run #%d %s: %s\n", run.Number, run.ID, run.State)
	for _, j := range run.Jobs {
		printf("  %-40s %s\n", cell(j.Name), cell(j.State))
	}
	printf("%s/runs/%s\n", strings.TrimRight(cl.server, "/"), run.ID)
	if !follow {
		return nil
	}
	var state string
	err := safeLog(func(out io.Writer) (err error) {
		state, err = followRun(ctx, cl, run.ID, out)
		return err
	})
	if err != nil {
		return err
	}
	printf("run #%d %s\n", run.Number, state)
	if state != "PASSED" {
		return exitError(1)
	}
	return nil
}
