package main

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/store"
)

// tokenCreateCmd is `runner token create`.
func tokenCreateCmd(g *global) *cobra.Command {
	var ttl time.Duration
	var description string
	var projects []string
	var untrusted, untrustedOnly bool
	create := command("create", "Make a one-time registration token for `forgeci-runner register` (admin)", cobra.NoArgs, withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
		var out struct {
			Token   string    `json:"registration_token"`
			Expires time.Time `json:"expires_at"`
		}
		if err := cl.do(ctx, "POST", "/v1/registration-tokens", map[string]any{"ttl_seconds": int(ttl.Seconds()),
			"description": description, "projects": projects, "untrusted": untrusted || untrustedOnly,
			"untrusted_only": untrustedOnly}, &out); err != nil {
			return err
		}
		if g.json {
			return printJSON(out)
		}
		printf("%s\nvalid once, until %s:\n  forgeci-runner register --server %s --registration-token %s --name NAME --labels linux\n",
			out.Token, out.Expires.Local().Format(time.RFC3339), cl.server, out.Token)
		return nil
	}))
	create.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token may be used (1m to 168h)")
	create.Flags().StringSliceVar(&projects, "project", nil, "a project the runner serves (repeat; none: every project)")
	create.Flags().BoolVar(&untrusted, "untrusted", false, "the runner also takes untrusted work: pull requests from forks, runs of members without the secrets permission")
	create.Flags().BoolVar(&untrustedOnly, "untrusted-only", false, "the runner takes untrusted work only, never a trusted job (with its secrets)")
	create.Flags().StringVar(&description, "description", "", "what it is for")
	return create
}

// tokenListCmd is `runner token list`.
func tokenListCmd(g *global) *cobra.Command {
	return command("list", "List registration tokens, newest first: who made each, its scope, and whether it was used, expired or revoked (admin)", cobra.NoArgs, withClient(g, func(ctx context.Context, cl *apiClient, _ []string) error {
		tokens, err := listAll[store.RegistrationInfo](ctx, cl, "/v1/registration-tokens", "registration_tokens", nil)
		if err != nil {
			return err
		}
		return printTable(g, tokens, "CREATED\tBY\tPROJECTS\tUNTRUSTED\tSTATE\tDESCRIPTION\tID", func(r store.RegistrationInfo) []any {
			state := "valid until " + r.ExpiresAt.Local().Format("2006-01-02 15:04")
			switch {
			case r.UsedAt != nil:
				state = "used by runner " + r.UsedByRunner
			case r.Expired:
				state = "expired " + r.ExpiresAt.Local().Format("2006-01-02 15:04")
			}
			scope := strings.Join(r.ProjectNames, ",")
			if scope == "" {
				scope = "all"
			}
			by := r.CreatedBy
			if by == "" {
				by = "(operator)"
			}
			return []any{r.CreatedAt.Local().Format("2006-01-02 15:04"), by, scope, untrustedCell(r.Untrusted, r.UntrustedOnly), state,
				r.Description, r.ID}
		})
	}))
}

// tokenRevokeCmd is `runner token revoke`.
func tokenRevokeCmd(g *global) *cobra.Command {
	return command("revoke TOKEN_ID", "End an unused registration token at once (admin; a used one: revoke its runner)", cobra.ExactArgs(1), withClient(g, func(ctx context.Context, cl *apiClient, args []string) error {
		var out store.RegistrationInfo
		if err := cl.do(ctx, "POST", "/v1/registration-tokens/"+url.PathEscape(args[0])+"/revoke", map[string]any{}, &out); err != nil {
			return err
		}
		if g.json {
			return printJSON(out)
		}
		printf("registration token %s revoked: it registers no runner\n", out.ID)
		return nil
	}))
}

// untrustedCell is a runner's or token's UNTRUSTED: false, true (both
// tiers) or only.
func untrustedCell(untrusted, only bool) any {
	if only {
		return "only"
	}
	return untrusted
}
