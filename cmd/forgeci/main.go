// Command forgeci is the ForgeCI command line: submit and follow runs, look
// at runs and logs, manage runners, and the operator's commands (the local
// stack, migrations, repositories, secrets, the test service wrapper).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	err := root.ExecuteContext(ctx)
	var exit exitError
	if err != nil && !errors.As(err, &exit) {
		// A server's message may quote a stranger's text (a job's name).
		fmt.Fprintf(os.Stderr, "forgeci: %s\n", plainText(explain(err).Error(), true))
	}
	os.Exit(exitStatus(err))
}

// exitStatus is the status the CLI exits with after err.
func exitStatus(err error) int {
	var exit exitError
	var se statusError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return int(exit)
	case errors.As(err, &se):
		return se.status
	}
	return 1
}

// statusError is an error whose message is printed as any, and whose exit
// status is its own: check's 2 for a file it could not read, against 1
// for one it read and found wrong.
type statusError struct {
	error
	status int
}

func (e statusError) Unwrap() error { return e.error }

// exitError carries an exit status out of a command (a run's outcome, a
// child's status) without printing anything more.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// explain adds what to do about an API error.
func explain(err error) error {
	var ae *domain.Error
	if errors.As(err, &ae) {
		switch ae.Status {
		case 401:
			return fmt.Errorf("%w\n  the token is missing or not accepted: run `forgeci login`, or set --token / FORGECI_TOKEN", err)
		case 403:
			return fmt.Errorf("%w\n  ask an admin of the project for that role (forgeci project member add)", err)
		}
	}
	return err
}

// global holds the flags every API command shares.
type global struct {
	url, token, config string
	json               bool
}

// client resolves the server and token: flags, then FORGECI_URL and
// FORGECI_TOKEN, then the config file `forgeci login` writes.
func (g *global) client() (*apiClient, error) {
	cfg, _ := readConfig(g.config)
	url, token := firstSet(g.url, os.Getenv("FORGECI_URL"), cfg.URL), firstSet(g.token, os.Getenv("FORGECI_TOKEN"), cfg.Token)
	if url == "" || token == "" {
		return nil, errors.New("no server or token: run `forgeci login --url URL --token TOKEN`, or set --url and --token (FORGECI_URL, FORGECI_TOKEN)")
	}
	return newClient(url, token), nil
}

func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func newRoot() *cobra.Command {
	g := &global{}
	root := &cobra.Command{
		Use:           "forgeci",
		Short:         "ForgeCI: a low-ops CI system",
		Long:          "ForgeCI: submit and follow runs, look at logs, manage runners, and run a local ForgeCI.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.url, "url", "", "ForgeCI API URL (default $FORGECI_URL, then the config file)")
	pf.StringVar(&g.token, "token", "", "user API token (default $FORGECI_TOKEN, then the config file)")
	pf.StringVar(&g.config, "config", "", "config file (default $FORGECI_CONFIG or ~/.config/forgeci/config.json)")
	pf.BoolVar(&g.json, "json", false, "print JSON instead of text")
	root.AddGroup(&cobra.Group{ID: "use", Title: "Runs and runners:"}, &cobra.Group{ID: "ops", Title: "Operating ForgeCI:"})
	for _, c := range []*cobra.Command{loginCmd(g), checkCmd(g), submitCmd(g), runCmd(g), runsCmd(g), artifactsCmd(g), logsCmd(g), testsCmd(g), cancelCmd(g), retryCmd(g),
		decideCmd(g, "approve", "Approve a run from a first-time contributor: its jobs start (project writers)"),
		decideCmd(g, "reject", "Reject a run from a first-time contributor: its jobs end CANCELED (project writers)"),
		projectCmd(g), secretCmd(g), varCmd(g), envCmd(g), deploymentsCmd(g), deployCmd(g), runnerCmd(g), tokenCmd(g)} {
		c.GroupID = "use"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{devCmd(), migrateCmd(), userCmd(), repoCmd(), deliveriesCmd(g), gcCmd(g), servicesCmd()} {
		c.GroupID = "ops"
		root.AddCommand(c)
	}
	return root
}

// command is a cobra command: its usage line, summary, arguments and action.
func command(use, short string, args cobra.PositionalArgs, run func(*cobra.Command, []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: args, RunE: run}
}

func databaseFlag(c *cobra.Command, v *string) {
	c.Flags().StringVar(v, "database-url", os.Getenv("FORGECI_DATABASE_URL"), "PostgreSQL URL (default $FORGECI_DATABASE_URL)")
}

func devCmd() *cobra.Command {
	var o devOptions
	c := command("dev", "Start a local ForgeCI: PostgreSQL, S3, every function's handler, the sweeper", cobra.NoArgs, func(c *cobra.Command, _ []string) error { return devCommand(c.Context(), o) })
	f := c.Flags()
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "address to serve the API and dashboard on (loopback only)")
	f.StringVar(&o.Dir, "dir", "", "directory for the throwaway PostgreSQL cluster (default: a new temporary directory)")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", store.DefaultLeaseTTL, "job lease lifetime")
	f.DurationVar(&o.SweepEvery, "sweep-every", 5*time.Second, "how often the sweeper runs")
	f.StringVar(&o.InfoFile, "info", "", "write the server URL, database URL and a registration token to this file (key=value lines)")
	return c
}

func migrateCmd() *cobra.Command {
	var url string
	c := command("migrate", "Apply pending database migrations (idempotent)", cobra.NoArgs, func(c *cobra.Command, _ []string) error { return migrateCommand(c.Context(), url) })
	databaseFlag(c, &url)
	return c
}

func userCmd() *cobra.Command {
	var url, name, role string
	c := &cobra.Command{Use: "user", Short: "Users (on the database directly, to bootstrap a stack)"}
	create := command("create", "Make a user and print its API token (once)", cobra.NoArgs, func(c *cobra.Command, _ []string) error { return userCreate(c.Context(), url, name, role) })
	databaseFlag(create, &url)
	create.Flags().StringVar(&name, "name", "", "user name")
	create.Flags().StringVar(&role, "role", store.RoleUser, "admin (everything, everywhere) or user (what project memberships give)")
	_ = create.MarkFlagRequired("name")
	_ = create.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"admin", "user"}, cobra.ShellCompDirectiveNoFileComp))
	c.AddCommand(create)
	return c
}

func repoCmd() *cobra.Command {
	var o repoOptions
	c := &cobra.Command{Use: "repo", Short: "GitHub repositories ForgeCI builds"}
	add := command("add", "Register a GitHub repository (its webhook secret and App installation)", cobra.NoArgs, func(c *cobra.Command, _ []string) error { return repoAdd(c.Context(), o) })
	databaseFlag(add, &o.DatabaseURL)
	f := add.Flags()
	f.Int64Var(&o.ID, "id", 0, "GitHub's numeric repository ID (repository.id in any webhook payload)")
	f.StringVar(&o.Name, "name", "", "owner/repo")
	f.Int64Var(&o.Installation, "installation", 0, "the GitHub App installation ID on that repository")
	f.StringVar(&o.Project, "project", "", "ForgeCI project its runs belong to (default: owner/repo); it must exist")
	f.BoolVar(&o.CreateProject, "create-project", false, "create the project if it does not exist")
	f.StringVar(&o.SecretFile, "secret-file", "", "file holding the webhook secret (default: generate one and print it)")
	for _, r := range []string{"id", "name", "installation"} {
		_ = add.MarkFlagRequired(r)
	}
	c.AddCommand(add)
	return c
}

func deliveriesCmd(g *global) *cobra.Command {
	o := deliveriesOptions{}
	c := &cobra.Command{
		Use:       "deliveries [list | retry GUID]",
		Short:     "GitHub webhook deliveries: states and errors; retry a FAILED one",
		Args:      cobra.MaximumNArgs(2),
		ValidArgs: []string{"list", "retry"},
		RunE: func(c *cobra.Command, args []string) error {
			sub := "list"
			if len(args) > 0 {
				sub, args = args[0], args[1:]
			}
			return deliveriesCommand(c.Context(), g, sub, args, o)
		},
	}
	c.Flags().StringVar(&o.State, "state", "", "only deliveries in this state: PENDING, DONE, IGNORED or FAILED")
	c.Flags().IntVar(&o.Limit, "limit", 50, "how many, newest first")
	return c
}

func servicesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "services -- CMD [ARGS...]",
		Short: "Start throwaway PostgreSQL and S3 servers for tests, run CMD with their addresses, stop them",
		// Everything after "--" is the command's own.
		DisableFlagParsing: true,
		RunE:               func(c *cobra.Command, args []string) error { return servicesCommand(c.Context(), args) },
	}
}
