package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

func newClient(server, token string) *apiClient {
	return &apiClient{server: strings.TrimRight(server, "/"), token: token, http: &http.Client{Timeout: 10 * time.Minute}}
}

// config is what `forgeci login` saves.
type config struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

func configPath(flag string) (string, error) {
	if p := firstSet(flag, os.Getenv("FORGECI_CONFIG")); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "forgeci", "config.json"), nil
}

func readConfig(flag string) (config, error) {
	var c config
	p, err := configPath(flag)
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("config file %s: %w", p, err)
	}
	return c, nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func loginCmd(g *global) *cobra.Command {
	// The token may come on stdin: one in a command line is in the
	// process list.
	return command("login", "Check the server's URL and an API token and save them in the config file "+
		"(--url or $FORGECI_URL; --token, $FORGECI_TOKEN or one line on stdin)",
		cobra.NoArgs, func(c *cobra.Command, _ []string) error {
			server, token := firstSet(g.url, os.Getenv("FORGECI_URL")), firstSet(g.token, os.Getenv("FORGECI_TOKEN"))
			if server == "" {
				return errors.New("usage: forgeci login --url URL [--token TOKEN], or the token on stdin: forgeci login --url URL < token-file")
			}
			if token == "" {
				var err error
				if token, err = readToken(os.Stdin); err != nil {
					return err
				}
			}
			return login(c.Context(), g, server, token)
		})
}

// readToken reads an API token, one line, from r (a terminal's user is
// asked for it on stderr).
func readToken(r *os.File) (string, error) {
	if fi, err := r.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		fmt.Fprint(os.Stderr, "API token: ")
	}
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	token := strings.TrimSpace(line)
	if token == "" {
		return "", fmt.Errorf("no API token: give --token, set FORGECI_TOKEN or write it on stdin (%v)", err)
	}
	return token, nil
}

// login checks server and token against the server and saves them.
func login(ctx context.Context, g *global, server, token string) error {
	cl := newClient(server, token)
	var me store.User
	if err := cl.do(ctx, "GET", "/v1/me", nil, &me); err != nil {
		return err
	}
	p, err := configPath(g.config)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(config{URL: cl.server, Token: token}, "", "  ")
	if err := writeFileAtomic(p, append(b, '\n')); err != nil {
		return err
	}
	printf("logged in to %s as %s (%s); saved in %s\n", cl.server, me.Name, me.Role, p)
	return nil
}

func submitCmd(g *global) *cobra.Command {
	o := submitOptions{Dir: "."}
	c := &cobra.Command{
		Use:   "submit",
		Short: "Snapshot a checkout, upload it and start a run",
		Long: "Snapshot a checkout (in git: what git tracks), upload it with a progress bar and start a run.\n" +
			"With --follow, stream the jobs' logs and exit 0 only if the run PASSED.",
		Args: cobra.NoArgs,
		RunE: withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
			o.JSON = g.json
			return submitCommand(ctx, cl, o)
		}),
	}
	f := c.Flags()
	f.StringVar(&o.Dir, "dir", ".", "the checkout or directory to submit")
	f.StringVar(&o.Project, "project", "", "project name (default: the directory's name)")
	f.BoolVar(&o.Untracked, "untracked", false, "in a git checkout, include untracked files that are not ignored")
	f.BoolVarP(&o.Follow, "follow", "f", false, "stream the jobs' logs until the run ends; exit 0 only if it PASSED")
	_ = c.MarkFlagDirname("dir")
	return c
}

func runsCmd(g *global) *cobra.Command {
	var project, branch, state, trigger string
	var limit int
	c := command("runs [RUN_ID]", "List runs, newest first, or show one run and its jobs", cobra.MaximumNArgs(1), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		if len(args) == 1 {
			return showRun(ctx, cl, args[0], g.json)
		}
		var out struct {
			Runs []store.Run `json:"runs"`
		}
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		for k, v := range map[string]string{"project": project, "branch": branch, "state": strings.ToUpper(state), "trigger": trigger} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if err := cl.do(ctx, "GET", "/v1/runs?"+q.Encode(), nil, &out); err != nil {
			return err
		}
		return printTable(g, out.Runs, "RUN\tNAME\tSTATE\tTRIGGER\tCOMMIT\tCREATED\tID", func(r store.Run) []any {
			sha := r.GitSHA
			if len(sha) > 10 {
				sha = sha[:10]
			}
			return []any{fmt.Sprintf("%s #%d", r.Project, r.Number), cmp.Or(domain.Truncate(r.RunName, 60), "-"), r.State, r.Trigger, sha,
				r.CreatedAt.Local().Format("2006-01-02 15:04"), r.ID}
		})
	}))
	c.Flags().StringVarP(&project, "project", "p", "", "only this project's runs")
	c.Flags().StringVarP(&branch, "branch", "b", "", "only this branch's (or full ref's) runs")
	c.Flags().StringVarP(&state, "state", "s", "", "only runs in this state (pending, running, passed, failed, canceled)")
	c.Flags().StringVarP(&trigger, "trigger", "t", "", "only runs whose trigger starts so (github:push, github:pull_request, schedule, dispatch, cli, retry)")
	c.Flags().IntVarP(&limit, "limit", "n", 20, "how many (at most 200)")
	return c
}

type runDetail struct {
	store.Run
	Jobs []store.JobInfo `json:"jobs"`
}

func showRun(ctx context.Context, cl *apiClient, id string, asJSON bool) error {
	var v runDetail
	if err := cl.do(ctx, "GET", "/v1/runs/"+url.PathEscape(id), nil, &v); err != nil {
		return err
	}
	if asJSON {
		return printJSON(v)
	}
	printf("%s #%d %s  (%s)\n", v.Project, v.Number, v.State, v.Trigger)
	if v.RunName != "" {
		printf("name %s\n", v.RunName)
	}
	printf("source %s\nmanifest %s\n", v.SourceDigest, v.ManifestDigest)
	printInputs(v.Inputs)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tATTEMPT\tTESTS\tREASON\tID")
	for _, j := range v.Jobs {
		tests := ""
		if t := j.Tests; t != nil {
			tests = fmt.Sprintf("%d passed, %d failed", t.Passed, t.Failed+t.Errored)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", cell(j.Name), cell(j.State), j.Generation, tests, cell(j.Reason), cell(j.ID))
	}
	return tw.Flush()
}

// jobByName finds a job of a run by name or ID.
func jobByName(ctx context.Context, cl *apiClient, runID, job string) (string, error) {
	var v runDetail
	if err := cl.do(ctx, "GET", "/v1/runs/"+url.PathEscape(runID), nil, &v); err != nil {
		return "", err
	}
	var names []string
	for _, j := range v.Jobs {
		if j.ID == job || j.Name == job {
			return j.ID, nil
		}
		names = append(names, j.Name)
	}
	return "", fmt.Errorf("run %s has no job %q (its jobs: %s)", runID, job, strings.Join(names, ", "))
}

// runOrJobPath is the API path of RUN_ID, or of its job JOB (name or ID).
func runOrJobPath(ctx context.Context, cl *apiClient, args []string) (string, error) {
	path := "/v1/runs/" + url.PathEscape(args[0])
	if len(args) == 2 {
		jobID, err := jobByName(ctx, cl, args[0], args[1])
		if err != nil {
			return "", err
		}
		path += "/jobs/" + url.PathEscape(jobID)
	}
	return path, nil
}

func logsCmd(g *global) *cobra.Command {
	var follow, timestamps bool
	var generation int
	c := command("logs RUN_ID [JOB]", "Print a job's log (every job's, prefixed, without JOB); -f follows until the run ends", cobra.RangeArgs(1, 2), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		if len(args) == 1 {
			if !follow {
				return errors.New("name a job, or use -f to follow every job of the run")
			}
			var state string
			err := safeLog(func(out io.Writer) (err error) {
				state, err = followRun(ctx, cl, args[0], out)
				return err
			})
			if err != nil {
				return err
			}
			printf("run %s\n", state)
			if state != "PASSED" {
				return exitError(1)
			}
			return nil
		}
		jobID, err := jobByName(ctx, cl, args[0], args[1])
		if err != nil {
			return err
		}
		return safeLog(func(out io.Writer) error {
			var stamps *stamper
			if timestamps {
				stamps = newStamper(out)
			}
			return printLog(ctx, cl, args[0], jobID, generation, follow, out, stamps)
		})
	}))
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing as the log grows, until the job ends")
	c.Flags().BoolVarP(&timestamps, "timestamps", "t", false, "begin each line with the time (UTC) its runner saw it")
	c.Flags().IntVar(&generation, "generation", 0, "the attempt to print (default: the current one)")
	return c
}

// printLog prints one job's log from the start; with follow it polls until
// the job has ended and everything is read; with stamps, each line begins
// with its time.
func printLog(ctx context.Context, cl *apiClient, runID, jobID string, gen int, follow bool, out io.Writer, stamps *stamper) error {
	var offset int64
	for {
		data, next, err := cl.log(ctx, runID, jobID, gen, offset)
		if err != nil {
			return err
		}
		if stamps == nil {
			_, _ = out.Write(data)
		} else if next > offset {
			if err := stamps.fetch(ctx, cl, runID, jobID, gen, offset, next); err != nil {
				return err
			}
			if err := stamps.write(data, next); err != nil {
				return err
			}
		}
		if next > offset { // offsets count stored bytes, not the masked text
			offset = next
			continue
		}
		if !follow {
			return nil
		}
		var j store.JobDetail
		if err := cl.do(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"/jobs/"+url.PathEscape(jobID), nil, &j); err != nil {
			return err
		}
		if isTerminal(j.State) {
			// One last pass: bytes may have landed after the previous read.
			follow = false
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func cancelCmd(g *global) *cobra.Command {
	return command("cancel RUN_ID [JOB]", "Cancel a run, or one of its jobs", cobra.RangeArgs(1, 2), postToRun(g, "cancel", func(out map[string]int) {
		printf("canceled %d queued job(s); asked %d running job(s) to stop\n", out["canceled"], out["cancel_requested"])
	}))
}

// postToRun posts verb to a run, or to one of its jobs (RUN_ID [JOB]),
// and prints the answer with show, or as JSON.
func postToRun[T any](g *global, verb string, show func(T)) func(*cobra.Command, []string) error {
	return withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		path, err := runOrJobPath(ctx, cl, args)
		if err != nil {
			return err
		}
		var out T
		if err := cl.do(ctx, "POST", path+"/"+verb, map[string]any{}, &out); err != nil {
			return err
		}
		if g.json {
			return printJSON(out)
		}
		show(out)
		return nil
	})
}

func retryCmd(g *global) *cobra.Command {
	return command("retry RUN_ID [JOB]", "Start a new run of a finished run, or of one of its jobs, on the same source", cobra.RangeArgs(1, 2), postToRun(g, "retry", func(v runDetail) {
		printf("run %s #%d %s: %s\n", v.Project, v.Number, v.ID, v.State)
	}))
}

func runnerCmd(g *global) *cobra.Command {
	c := &cobra.Command{Use: "runner", Short: "Runners: registration tokens, list, revoke"}
	token := &cobra.Command{Use: "token", Short: "Runner registration tokens"}
	token.AddCommand(tokenCreateCmd(g), tokenListCmd(g), tokenRevokeCmd(g))

	list := command("list", "List runners", cobra.NoArgs, withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
		runners, err := listAll[store.RunnerInfo](ctx, cl, "/v1/runners", "runners", nil)
		if err != nil {
			return err
		}
		return printTable(g, runners, "NAME\tLABELS\tPROJECTS\tUNTRUSTED\tLAST SEEN\tSTATUS\tID", func(r store.RunnerInfo) []any {
			seen, status := "never", "active"
			if r.LastSeenAt != nil {
				seen = r.LastSeenAt.Local().Format("2006-01-02 15:04:05")
			}
			if r.RevokedAt != nil {
				status = "revoked"
			}
			scope := strings.Join(r.ProjectNames, ",")
			if scope == "" {
				scope = "all"
			}
			return []any{r.Name, strings.Join(r.Labels, ","), scope, untrustedCell(r.Untrusted, r.UntrustedOnly), seen, status, r.ID}
		})
	}))
	revoke := command("revoke RUNNER_ID", "Revoke a runner: its token and leases stop working at once (admin)", cobra.ExactArgs(1), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		if err := cl.do(ctx, "POST", "/v1/runners/"+url.PathEscape(args[0])+"/revoke", map[string]any{}, nil); err != nil {
			return err
		}
		printf("runner %s revoked; its running jobs end ABORTED when their leases expire\n", args[0])
		return nil
	}))
	c.AddCommand(token, list, revoke)
	return c
}
