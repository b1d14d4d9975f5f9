package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/store"
)

// Projects, members, secrets and approvals, through the user API.

// projectPath resolves a project name (or ID) to its API path. Paths use
// the ID: a name holds "/", which not every gateway passes through escaped.
func projectPath(ctx context.Context, cl *apiClient, name string) (string, error) {
	projects, err := listAll[store.Project](ctx, cl, "/v1/projects", "projects", nil)
	if err != nil {
		return "", err
	}
	for _, p := range projects {
		if p.Name == name || p.ID == name {
			return "/v1/projects/" + url.PathEscape(p.ID), nil
		}
	}
	return "", fmt.Errorf("no project %q that you can read (forgeci project list shows yours)", name)
}

// withClient adapts a command body that needs the API client.
func withClient(g *global, fn func(ctx context.Context, cl *apiClient, args []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		cl, err := g.client()
		if err != nil {
			return err
		}
		return fn(c.Context(), cl, args)
	}
}

// printTable prints items as JSON with --json, else as a table under
// header (tab-separated), a row of row's values each.
func printTable[T any](g *global, items []T, header string, row func(T) []any) error {
	if g.json {
		return printJSON(items)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		vals := row(it)
		for i, v := range vals {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, cell(v))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// inProject is withClient for a command about one project, named by its
// first argument or, when flag is not nil, by that flag: fn gets the
// project's API path.
func inProject(g *global, flag *string, fn func(ctx context.Context, cl *apiClient, path string, args []string) error) func(*cobra.Command, []string) error {
	return withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		name := ""
		if flag != nil {
			name = *flag
		} else if len(args) > 0 {
			name = args[0]
		}
		path, err := projectPath(ctx, cl, name)
		if err != nil {
			return err
		}
		return fn(ctx, cl, path, args)
	})
}

func projectCmd(g *global) *cobra.Command {
	c := &cobra.Command{Use: "project", Short: "Projects: create, list, show; members and their roles"}
	var branch string
	create := &cobra.Command{
		Use: "create NAME", Short: "Create a project (global admins)", Args: cobra.ExactArgs(1),
		RunE: withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
			var p store.Project
			if err := cl.do(ctx, "POST", "/v1/projects", map[string]any{"name": args[0], "default_branch": branch}, &p); err != nil {
				return err
			}
			if g.json {
				return printJSON(p)
			}
			printf("project %s created (default branch %s, id %s)\n", p.Name, p.DefaultBranch, p.ID)
			return nil
		}),
	}
	create.Flags().StringVar(&branch, "default-branch", "main", "the branch whose caches every run may restore")
	list := &cobra.Command{
		Use: "list", Short: "List the projects you can read", Args: cobra.NoArgs,
		RunE: withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
			projects, err := listAll[store.Project](ctx, cl, "/v1/projects", "projects", nil)
			if err != nil {
				return err
			}
			return printTable(g, projects, "PROJECT\tROLE\tSECRETS\tRUNS\tLAST\tID", func(p store.Project) []any {
				return []any{p.Name, p.Role, p.Secrets, p.Runs, p.LastState, p.ID}
			})
		}),
	}
	c.AddCommand(create, list, membersCmd(g), memberCmd(g))
	c.AddCommand(storageCmds(g)...)
	c.AddCommand(hookCmds(g)...)
	return c
}

func membersCmd(g *global) *cobra.Command {
	return &cobra.Command{
		Use: "members PROJECT", Short: "List a project's members (project admins)", Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			members, err := listAll[store.Member](ctx, cl, path+"/members", "members", nil)
			if err != nil {
				return err
			}
			return printTable(g, members, "USER\tROLE\tSECRETS\tID", func(m store.Member) []any {
				return []any{m.UserName, m.Role, m.Secrets, m.UserID}
			})
		}),
	}
}

func memberCmd(g *global) *cobra.Command {
	c := &cobra.Command{Use: "member", Short: "Add, change or remove a project member (project admins)"}
	var role string
	var secrets bool
	add := &cobra.Command{
		Use: "add PROJECT USER", Short: "Add a user to a project, or change their role", Args: cobra.ExactArgs(2),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			var m store.Member
			if err := cl.do(ctx, "POST", path+"/members", map[string]any{"user": args[1], "role": role, "secrets": secrets}, &m); err != nil {
				return err
			}
			printf("%s is %s of %s; runs they start %s secrets\n", m.UserName, m.Role, args[0],
				map[bool]string{true: "get the project's", false: "do not get"}[m.Secrets])
			return nil
		}),
	}
	add.Flags().StringVar(&role, "role", store.RoleWrite, "read, write or admin")
	add.Flags().BoolVar(&secrets, "secrets", false, "runs this member starts are trusted: they get the project's secrets")
	_ = add.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"read", "write", "admin"}, cobra.ShellCompDirectiveNoFileComp))
	remove := &cobra.Command{
		Use: "remove PROJECT USER_ID", Short: "Remove a member (their ID: forgeci project members)", Args: cobra.ExactArgs(2),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			if err := cl.do(ctx, "POST", path+"/members/"+url.PathEscape(args[1])+"/remove", map[string]any{}, nil); err != nil {
				return err
			}
			printf("removed %s from %s\n", args[1], args[0])
			return nil
		}),
	}
	c.AddCommand(add, remove)
	return c
}

func secretCmd(g *global) *cobra.Command {
	var project, name, env string
	c := &cobra.Command{Use: "secret", Short: "Project secrets: set, list, delete (project admins; values are never shown)"}
	set := command("set", "Set a project secret; the value is read from standard input", cobra.NoArgs, withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
		value, err := io.ReadAll(io.LimitReader(os.Stdin, 65537))
		if err != nil {
			return err
		}
		path, err := projectPath(ctx, cl, project)
		if err != nil {
			return err
		}
		body := map[string]any{"name": name, "value": strings.TrimSuffix(string(value), "\n"), "environment": env}
		if err := cl.do(ctx, "POST", path+"/secrets", body, nil); err != nil {
			return err
		}
		scope := ""
		if env != "" {
			scope = " let deploy to " + env
		}
		printf("secret %s of %s set: jobs%s that name it get it (${{ secrets.%s }} or secrets: [%s]), in trusted runs only\n",
			name, project, scope, name, name)
		return nil
	}))
	list := &cobra.Command{
		Use: "list", Short: "List a project's secret names", Args: cobra.NoArgs,
		RunE: inProject(g, &project, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			secrets, err := listAll[store.SecretInfo](ctx, cl, path+"/secrets", "secrets", nil)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(secrets)
			}
			for _, s := range secrets {
				printf("%s\t(set %s)\n", s.Name, s.UpdatedAt.Local().Format("2006-01-02 15:04"))
			}
			return nil
		}),
	}
	del := &cobra.Command{
		Use: "delete", Short: "Delete a project secret", Args: cobra.NoArgs,
		RunE: inProject(g, &project, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			return cl.do(ctx, "POST", path+"/secrets/"+url.PathEscape(name)+"/delete?environment="+url.QueryEscape(env), map[string]any{}, nil)
		}),
	}
	for _, sub := range []*cobra.Command{set, list, del} {
		sub.Flags().StringVar(&project, "project", "", "project")
		_ = sub.MarkFlagRequired("project")
		if sub != list {
			sub.Flags().StringVar(&name, "name", "", "secret name: an upper-case environment variable name")
			_ = sub.MarkFlagRequired("name")
			sub.Flags().StringVar(&env, "environment", "", "the environment whose secret it is: only jobs let deploy there get it (none: the project's own)")
		}
	}
	c.AddCommand(set, list, del)
	return c
}

// decideCmd is approve or reject: a writer's decision on a run from a
// first-time contributor.
func decideCmd(g *global, verb, short string) *cobra.Command {
	return &cobra.Command{
		Use: verb + " RUN_ID", Short: short, Args: cobra.ExactArgs(1),
		RunE: withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
			var v runDetail
			if err := cl.do(ctx, "POST", "/v1/runs/"+url.PathEscape(args[0])+"/"+verb, map[string]any{}, &v); err != nil {
				return err
			}
			if g.json {
				return printJSON(v)
			}
			printf("run %s #%d %s by %s: %s\n", v.Project, v.Number, v.Approval, v.ApprovalBy, v.State)
			return nil
		}),
	}
}

// listAll reads every page of a list route: path answers {field: [...],
// "next_cursor"}; query holds the route's own filters.
func listAll[T any](ctx context.Context, cl *apiClient, path, field string, query url.Values) ([]T, error) {
	var all []T
	q := url.Values{"limit": {"200"}}
	for k, v := range query {
		q[k] = v
	}
	for {
		var page map[string]json.RawMessage
		if err := cl.do(ctx, "GET", path+"?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		var items []T
		if err := json.Unmarshal(page[field], &items); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		all = append(all, items...)
		var next string
		_ = json.Unmarshal(page["next_cursor"], &next)
		if next == "" {
			return all, nil
		}
		q.Set("cursor", next)
	}
}

// storageCmds are `project storage P` and `project set P ...`.
func storageCmds(g *global) []*cobra.Command {
	show := &cobra.Command{
		Use: "storage PROJECT", Short: "What a project keeps: runs, log, artifact, cache and blob bytes, retention and quotas",
		Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			var st store.Storage
			if err := cl.do(ctx, "GET", path+"/storage", nil, &st); err != nil {
				return err
			}
			return printStorage(g, st)
		}),
	}
	var retention int
	var cacheQuota, storageQuota int64
	var badges string
	set := &cobra.Command{
		Use: "set PROJECT", Short: "Set a project's retention (days), quotas (bytes) and badges; the storage quota needs a global admin",
		Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			body := map[string]any{}
			if retention != 0 {
				body["retention_days"] = retention
			}
			if cacheQuota != 0 {
				body["cache_quota_bytes"] = cacheQuota
			}
			if storageQuota != 0 {
				body["storage_quota_bytes"] = storageQuota
			}
			switch badges {
			case "":
			case "public", "private":
				body["badges_public"] = badges == "public"
			default:
				return fmt.Errorf("--badges is public or private, not %q", badges)
			}
			var st store.Storage
			if err := cl.do(ctx, "POST", path+"/settings", body, &st); err != nil {
				return err
			}
			return printStorage(g, st)
		}),
	}
	set.Flags().IntVar(&retention, "retention-days", 0, "keep finished runs, their logs and artifacts this many days (1-3650)")
	set.Flags().Int64Var(&cacheQuota, "cache-quota", 0, "bytes of caches kept; beyond, the least recently restored go")
	set.Flags().Int64Var(&storageQuota, "storage-quota", 0, "bytes of blobs the project may hold (global admins)")
	set.Flags().StringVar(&badges, "badges", "", "public: serve the status badges without login (GET /v1/projects/ID/badge.svg); private: members only")
	return []*cobra.Command{show, set}
}

func printStorage(g *global, st store.Storage) error {
	if g.json {
		return printJSON(st)
	}
	badges := "private"
	if st.BadgesPublic {
		badges = "public"
	}
	printf("runs %d; logs %d bytes, artifacts %d, caches %d (quota %d), blobs held %d (quota %d); runs kept %d days; badges %s\n",
		st.Runs, st.LogBytes, st.ArtifactBytes, st.CacheBytes, st.CacheQuotaBytes, st.BlobBytes, st.StorageQuotaBytes, st.RetentionDays, badges)
	return nil
}

// gcCmd is `forgeci gc --dry-run`: what the collector would remove now.
func gcCmd(g *global) *cobra.Command {
	var dry bool
	c := &cobra.Command{
		Use: "gc --dry-run", Short: "Show what the garbage collector would remove now (global admins)", Args: cobra.NoArgs,
		RunE: withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
			if !dry {
				return fmt.Errorf("the collector runs on its own schedule (every ten minutes); use --dry-run to see what it would remove now")
			}
			var plan store.GCResult
			if err := cl.do(ctx, "GET", "/v1/gc", nil, &plan); err != nil {
				return err
			}
			if g.json {
				return printJSON(plan)
			}
			printf("would reject %d runs left waiting for approval; would remove: %d runs past retention, %d deliveries, %d remembered push bodies, %d staged cache saves, %d idle caches, "+
				"%d caches over quota, %d uploads never committed, %d unreferenced blobs (%d bytes, more once those go)\n",
				plan.ApprovalsExpired, plan.Runs, plan.Deliveries, plan.PushBodies, plan.PendingCaches, plan.CachesIdle, plan.CachesOverQuota, plan.Uploads, plan.Blobs, plan.BlobBytes)
			return nil
		}),
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "list what would go, delete nothing")
	return c
}
