package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/forgeci/forgeci/shared/store"
)

// adminStore opens the database named by --database-url for an admin
// command that works on it directly (as `user create` does).
func adminStore(ctx context.Context, url string) (*store.Store, func(), error) {
	if url == "" {
		return nil, nil, errors.New("--database-url or FORGECI_DATABASE_URL is required")
	}
	pool, err := store.OpenPool(ctx, url, store.PoolOptions{MaxConns: 2})
	if err != nil {
		return nil, nil, err
	}
	return store.New(pool, store.Limits{}), pool.Close, nil
}

func databaseFlag(fs *flag.FlagSet) *string {
	return fs.String("database-url", os.Getenv("FORGECI_DATABASE_URL"), "PostgreSQL URL (default $FORGECI_DATABASE_URL)")
}

// repoCommand: forgeci repo add.
func repoCommand(ctx context.Context, args []string) error {
	const use = "usage: forgeci repo add --id GITHUB_REPO_ID --name OWNER/REPO --installation ID --project P [--secret-file F]"
	if len(args) == 0 || args[0] != "add" {
		return errors.New(use)
	}
	fs := flag.NewFlagSet("repo add", flag.ContinueOnError)
	url := databaseFlag(fs)
	id := fs.Int64("id", 0, "GitHub's numeric repository ID (repository.id in any webhook payload)")
	name := fs.String("name", "", "owner/repo")
	inst := fs.Int64("installation", 0, "the GitHub App installation ID on that repository")
	project := fs.String("project", "", "ForgeCI project its runs belong to (default: the repository name)")
	secretFile := fs.String("secret-file", "", "file holding the webhook secret (default: generate one and print it)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *project == "" {
		*project = *name
	}
	secret, generated := "", false
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			return err
		}
		secret = strings.TrimSpace(string(b))
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		secret, generated = hex.EncodeToString(b), true
	}
	st, done, err := adminStore(ctx, *url)
	if err != nil {
		return err
	}
	defer done()
	if err := st.AddRepository(ctx, store.Repository{GitHubID: *id, FullName: *name, InstallationID: *inst,
		WebhookSecret: secret, Project: *project}); err != nil {
		return err
	}
	fmt.Printf("repository %s registered (project %s).\n", *name, *project)
	if generated {
		fmt.Printf("Set this as the webhook secret (Content type: application/json; events: push, pull_request), shown only now:\n%s\n", secret)
	}
	return nil
}

// secretCommand: forgeci secret set, the value read from stdin so that it
// is not in the shell history or the process list.
func secretCommand(ctx context.Context, args []string) error {
	const use = "usage: forgeci secret set --project P --name NAME < value"
	if len(args) == 0 || args[0] != "set" {
		return errors.New(use)
	}
	fs := flag.NewFlagSet("secret set", flag.ContinueOnError)
	url := databaseFlag(fs)
	project := fs.String("project", "", "project")
	name := fs.String("name", "", "secret name (an environment variable name, upper case)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	value, err := io.ReadAll(io.LimitReader(os.Stdin, 65537))
	if err != nil {
		return err
	}
	st, done, err := adminStore(ctx, *url)
	if err != nil {
		return err
	}
	defer done()
	if err := st.SetSecret(ctx, *project, *name, strings.TrimSuffix(string(value), "\n")); err != nil {
		return err
	}
	fmt.Printf("secret %s of project %s set; jobs see it as $%s, except runs of pull requests from forks.\n", *name, *project, *name)
	return nil
}

// deliveriesCommand: forgeci deliveries [list|retry GUID].
func deliveriesCommand(ctx context.Context, args []string) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("deliveries "+sub, flag.ContinueOnError)
	url := databaseFlag(fs)
	state := fs.String("state", "", "only deliveries in this state: PENDING, DONE, IGNORED or FAILED")
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 50, "how many, newest first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, done, err := adminStore(ctx, *url)
	if err != nil {
		return err
	}
	defer done()
	switch sub {
	case "retry":
		if fs.NArg() != 1 {
			return errors.New("usage: forgeci deliveries retry GUID")
		}
		if err := st.RetryDelivery(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Printf("delivery %s is pending again\n", fs.Arg(0))
		return nil
	case "list":
		ds, err := st.Deliveries(ctx, strings.ToUpper(*state), *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(ds)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RECEIVED\tGUID\tEVENT\tSTATE\tATTEMPTS\tRUN\tERROR / NOTE")
		for _, d := range ds {
			why := d.LastError
			if d.State != store.DeliveryFailed && d.State != store.DeliveryPending {
				why = d.Note
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ReceivedAt.Format("2006-01-02 15:04:05"), d.GUID, d.Event,
				d.State, d.Attempts, d.RunID, strings.ReplaceAll(why, "\n", " "))
		}
		return tw.Flush()
	}
	return fmt.Errorf("unknown deliveries command %q (list, retry)", sub)
}
