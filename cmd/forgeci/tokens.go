package main

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/store"
)

// tokenCmd is `forgeci token list|create|revoke`: the caller's own API
// tokens, or (global admins) another user's with --user.
func tokenCmd(g *global) *cobra.Command {
	var user, description string
	var days int
	c := &cobra.Command{Use: "token", Short: "Your API tokens: list, create, revoke (--user: another's, for global admins)"}
	c.PersistentFlags().StringVar(&user, "user", "me", "whose tokens: a user ID (global admins), or me")
	base := func() string { return "/v1/users/" + url.PathEscape(user) + "/tokens" }

	list := command("list", "List the tokens, newest first, revoked ones too (never their secrets)", cobra.NoArgs, withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
		tokens, err := listAll[store.TokenInfo](ctx, cl, base(), "tokens", nil)
		if err != nil {
			return err
		}
		return printTable(g, tokens, "ID\tDESCRIPTION\tCREATED\tLAST USED\tMADE WITH\tSTATUS", func(t store.TokenInfo) []any {
			status, with, used := "active", t.CreatedBy, "never"
			switch {
			case t.RevokedAt != nil:
				status = "revoked " + t.RevokedAt.Local().Format("2006-01-02 15:04:05")
			case t.ExpiresAt != nil && !t.ExpiresAt.After(time.Now()):
				status = "expired " + t.ExpiresAt.Local().Format("2006-01-02 15:04:05")
			case t.ExpiresAt != nil:
				status = "active, expires " + t.ExpiresAt.Local().Format("2006-01-02 15:04:05")
			}
			if with == "" {
				with = "-"
			}
			if t.LastUsedAt != nil {
				used = t.LastUsedAt.Local().Format("2006-01-02 15:04")
			}
			return []any{t.ID, t.Description, t.CreatedAt.Local().Format("2006-01-02 15:04:05"), used, with, status}
		})
	}))
	create := command("create", "Make another token (printed once)", cobra.NoArgs, withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
		var out store.CreatedToken
		if err := cl.do(ctx, "POST", base(), store.NewToken{Description: description, ExpiresInDays: days}, &out); err != nil {
			return err
		}
		if g.json {
			return printJSON(out)
		}
		printf("%s\ntoken %s; shown once: keep it now\n", out.Token, out.ID)
		if out.ExpiresAt != nil {
			printf("it stops working at %s\n", out.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
		}
		return nil
	}))
	create.Flags().StringVar(&description, "description", "", "what it is for (at most 200 characters)")
	create.Flags().IntVar(&days, "expires-in-days", 0, "how many days it works (1 to 3650; 0: until revoked); "+
		"a token made with an expiring token expires no later than it. What its requests left (schedules, snapshots) "+
		"lasts until it is revoked, not until it expires")
	revoke := command("revoke TOKEN_ID", "Revoke a token and the tokens made with it: they stop working at once, and so do dashboard "+
		"sessions opened with them; snapshots and inputs given with them are not run again, and their runs' trusted jobs not handed out "+
		"(submit again with a token that works)", cobra.ExactArgs(1), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		var out store.TokenInfo
		if err := cl.do(ctx, "POST", base()+"/"+url.PathEscape(args[0])+"/revoke", map[string]any{}, &out); err != nil {
			return err
		}
		if g.json {
			return printJSON(out)
		}
		printf("token %s (%q) revoked\n", out.ID, out.Description)
		if len(out.AlsoRevoked) > 0 {
			printf("and the %d tokens made with it: %s\n", len(out.AlsoRevoked), strings.Join(out.AlsoRevoked, ", "))
		}
		if len(out.RunnersToCheck) > 0 {
			printf("runners registered with registration tokens these made (still registered; if the token leaked, "+
				"revoke them with forgeci runner revoke): %s\n", strings.Join(out.RunnersToCheck, ", "))
		}
		if len(out.SchedulesRemoved) > 0 {
			printf("schedules removed, set by runs made with these tokens or of snapshots submitted with them "+
				"(a submit from the default branch with a token that works sets them again): %s\n", strings.Join(out.SchedulesRemoved, ", "))
		}
		printf("snapshots and manual runs' inputs given with these tokens are not run again (retries, manual runs, schedules), " +
			"and their unfinished runs' trusted jobs are not handed out: submit again with a token that works\n")
		return nil
	}))
	c.AddCommand(list, create, revoke)
	return c
}
