package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// envCmd is `env set|list|delete`: a project's environments and their
// rules (docs/deployments.md).
func envCmd(g *global) *cobra.Command {
	c := &cobra.Command{Use: "env", Short: "A project's deployment environments: reviewers, allowed refs, secrets"}
	var reviewers string
	var allow []string
	var noSelf bool
	set := &cobra.Command{
		Use: "set PROJECT NAME", Short: "Make or replace an environment's rules (project admins)", Args: cobra.ExactArgs(2),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			var e store.Environment
			body := map[string]any{"reviewer_role": reviewers, "allowed_refs": allow, "prevent_self_review": noSelf}
			if err := cl.do(ctx, "POST", path+"/environments/"+url.PathEscape(args[1]), body, &e); err != nil {
				return err
			}
			if g.json {
				return printJSON(e)
			}
			printf("environment %s of %s: %s\n", e.Name, args[0], describeEnv(e))
			return nil
		}),
	}
	set.Flags().StringVar(&reviewers, "reviewers", "", "write or admin: each deployment waits for a member of that role to approve it (empty: none)")
	set.Flags().BoolVar(&noSelf, "prevent-self-review", false, "the member whose run it is may not approve its deployment")
	set.Flags().StringArrayVar(&allow, "allow", nil, "a ref that may deploy (repeat): a branch pattern such as main or release/*, or refs/tags/v*; none: any")
	list := &cobra.Command{
		Use: "list PROJECT", Short: "List a project's environments", Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			var out struct {
				Environments []store.Environment `json:"environments"`
			}
			if err := cl.do(ctx, "GET", path+"/environments", nil, &out); err != nil {
				return err
			}
			return printTable(g, out.Environments, "NAME\tRULES\tSECRETS", func(e store.Environment) []any {
				return []any{e.Name, describeEnv(e), strings.Join(e.Secrets, ",")}
			})
		}),
	}
	del := &cobra.Command{
		Use: "delete PROJECT NAME", Short: "Delete an environment and its secrets (its history stays)", Args: cobra.ExactArgs(2),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			return cl.do(ctx, "POST", path+"/environments/"+url.PathEscape(args[1])+"/delete", map[string]any{}, nil)
		}),
	}
	c.AddCommand(set, list, del)
	return c
}

func describeEnv(e store.Environment) string {
	rules := "no reviewers"
	if e.ReviewerRole != "" {
		rules = "reviewed by " + e.ReviewerRole
	}
	if e.PreventSelfReview {
		rules += " (not self)"
	}
	if len(e.AllowedRefs) == 0 {
		return rules + ", any ref"
	}
	return rules + ", refs " + strings.Join(e.AllowedRefs, " ")
}

// deploymentsCmd lists a project's deployments, newest first.
func deploymentsCmd(g *global) *cobra.Command {
	var env string
	c := &cobra.Command{
		Use: "deployments PROJECT", Short: "A project's deployments, newest first: who let each go, and its job's state", Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			q := url.Values{}
			if env != "" {
				q.Set("environment", env)
			}
			list, err := listAll[store.Deployment](ctx, cl, path+"/deployments", "deployments", q)
			if err != nil {
				return err
			}
			return printTable(g, list, "ENVIRONMENT\tRUN\tJOB\tREF\tTRIGGER\tDECISION\tBY\tSTATE", func(d store.Deployment) []any {
				return []any{d.Environment, fmt.Sprintf("#%d", d.RunNumber), d.JobName, d.Ref, d.Trigger, d.Decision, d.DecidedBy, d.State}
			})
		}),
	}
	c.Flags().StringVar(&env, "environment", "", "one environment's history")
	return c
}

// deployCmd is `deploy approve|reject RUN JOB`: a reviewer's decision on
// the deployment a job waits for.
func deployCmd(g *global) *cobra.Command {
	c := &cobra.Command{Use: "deploy", Short: "Review the deployment a job waits for"}
	for _, verb := range []string{"approve", "reject"} {
		var comment string
		sub := &cobra.Command{
			Use: verb + " RUN_ID JOB", Short: verb + " the deployment job JOB (ID or name) of run RUN_ID waits for", Args: cobra.ExactArgs(2),
			RunE: withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
				run, jobID, err := jobOfRun(ctx, cl, args[0], args[1])
				if err != nil {
					return err
				}
				var j store.JobDetail
				path := "/v1/runs/" + url.PathEscape(args[0]) + "/jobs/" + url.PathEscape(jobID) + "/deployment/" + verb
				if err := cl.do(ctx, "POST", path, map[string]any{"comment": comment}, &j); err != nil {
					return err
				}
				if g.json {
					return printJSON(j)
				}
				printf("job %s: %s %s\n", cell(j.Name), cell(j.State), cell(j.Reason))
				printDeployed(run.Run)
				return nil
			}),
		}
		sub.Flags().StringVarP(&comment, "message", "m", "", "a comment kept with the decision")
		c.AddCommand(sub)
	}
	return c
}

// jobOfRun finds a run's job by ID or name.
func jobOfRun(ctx context.Context, cl *apiClient, runID, job string) (runDetail, string, error) {
	var v runDetail
	if err := cl.do(ctx, "GET", "/v1/runs/"+url.PathEscape(runID), nil, &v); err != nil {
		return v, "", err
	}
	for _, j := range v.Jobs {
		if j.ID == job || j.Name == job {
			return v, j.ID, nil
		}
	}
	return v, "", fmt.Errorf("run %s has no job %q", runID, job)
}

// printDeployed says what the decision was on, as the dashboard's review
// form shows it: the commit, the ref, what started the run, uncommitted
// changes, a manual run's inputs.
func printDeployed(r store.Run) {
	printf("run %s #%d: commit %s of %s, started by %s\n", r.Project, r.Number, cmp.Or(r.GitSHA, "(none)"),
		cmp.Or(r.GitRef, "no ref"), r.Trigger)
	if r.GitDirty {
		printf("from a checkout with uncommitted changes\n")
	}
	printInputs(r.Inputs)
}

// printInputs prints a manual run's inputs by name, quoted, what is not
// printable escaped (domain.ShowInput): what the steps get.
func printInputs(in map[string]any) {
	for _, name := range slices.Sorted(maps.Keys(in)) {
		printf("input %s = %s\n", name, domain.ShowInput(in[name]))
	}
}
