package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

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

// repoOptions are the flags of forgeci repo add.
type repoOptions struct {
	DatabaseURL, Name, Project, SecretFile string
	ID, Installation                       int64
	CreateProject                          bool
}

// repoAdd: forgeci repo add.
func repoAdd(ctx context.Context, o repoOptions) error {
	url, id, name, inst, project, secretFile := &o.DatabaseURL, &o.ID, &o.Name, &o.Installation, &o.Project, &o.SecretFile
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
	if o.CreateProject {
		if _, err := st.ProjectID(ctx, *project); err != nil {
			if _, err := st.CreateProject(ctx, *project, "main"); err != nil {
				return err
			}
			printf("project %s created; add its members with forgeci project member add\n", *project)
		}
	}
	if err := st.AddRepository(ctx, store.Repository{GitHubID: *id, FullName: *name, InstallationID: *inst,
		WebhookSecret: secret, Project: *project}); err != nil {
		return err
	}
	printf("repository %s registered (project %s).\n", *name, *project)
	if generated {
		printf("Set this as the webhook secret (Content type: application/json; events: push, pull_request), shown only now:\n%s\n", secret)
	}
	return nil
}

// deliveriesOptions are the flags of forgeci deliveries.
type deliveriesOptions struct {
	State string
	Limit int
}

// deliveriesCommand: forgeci deliveries list, or retry GUID, through the
// API: each caller sees the deliveries of the projects they can read.
func deliveriesCommand(ctx context.Context, g *global, sub string, args []string, o deliveriesOptions) error {
	cl, err := g.client()
	if err != nil {
		return err
	}
	switch sub {
	case "retry":
		if len(args) != 1 {
			return errors.New("usage: forgeci deliveries retry GUID")
		}
		if err := cl.do(ctx, "POST", "/v1/deliveries/"+url.PathEscape(args[0])+"/retry", map[string]any{}, nil); err != nil {
			return err
		}
		printf("delivery %s is pending again\n", args[0])
		return nil
	case "list":
		var out struct {
			Deliveries []store.Delivery `json:"deliveries"`
		}
		q := url.Values{"limit": {fmt.Sprint(o.Limit)}, "state": {o.State}}
		if err := cl.do(ctx, "GET", "/v1/deliveries?"+q.Encode(), nil, &out); err != nil {
			return err
		}
		return printTable(g, out.Deliveries, "RECEIVED\tGUID\tEVENT\tSTATE\tATTEMPTS\tRUN\tERROR / NOTE", func(d store.Delivery) []any {
			why := d.LastError
			if d.State != store.DeliveryFailed && d.State != store.DeliveryPending {
				why = d.Note
			}
			return []any{d.ReceivedAt.Local().Format("2006-01-02 15:04:05"), d.GUID, d.Event,
				d.State, d.Attempts, d.RunID, strings.ReplaceAll(why, "\n", " ")}
		})
	}
	return fmt.Errorf("unknown deliveries command %q (list, retry)", sub)
}
