package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/store"
)

// hookCmds are `project hook add|list|remove` and `project notifications`.
func hookCmds(g *global) []*cobra.Command {
	hook := &cobra.Command{Use: "hook", Short: "A project's notification hooks (project admins)"}
	var format string
	var events []string
	add := &cobra.Command{
		Use: "add PROJECT URL", Short: "Notify URL when runs end (prints the signing secret, once)", Args: cobra.ExactArgs(2),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			var out struct {
				Hook   store.Hook `json:"hook"`
				Secret string     `json:"secret"`
			}
			body := map[string]any{"url": args[1], "format": format, "events": events}
			if err := cl.do(ctx, "POST", path+"/hooks", body, &out); err != nil {
				return err
			}
			if g.json {
				return printJSON(out)
			}
			printf("hook %s: %s (%s) on %v\nsigning secret (shown once): %s\n", out.Hook.ID, out.Hook.URL, out.Hook.Format, out.Hook.Events, out.Secret)
			return nil
		}),
	}
	add.Flags().StringVar(&format, "format", "json", "json (signed) or slack (a Slack-compatible body)")
	add.Flags().StringSliceVar(&events, "events", []string{"branch_failed", "branch_recovered"}, "run_ended, branch_failed, branch_recovered")
	list := &cobra.Command{
		Use: "list PROJECT", Short: "List a project's hooks", Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			var out struct {
				Hooks []store.Hook `json:"hooks"`
			}
			if err := cl.do(ctx, "GET", path+"/hooks", nil, &out); err != nil {
				return err
			}
			return printTable(g, out.Hooks, "ID\tURL\tFORMAT\tEVENTS", func(h store.Hook) []any {
				return []any{h.ID, h.URL, h.Format, h.Events}
			})
		}),
	}
	remove := &cobra.Command{
		Use: "remove PROJECT HOOK_ID", Short: "Remove a hook and its deliveries", Args: cobra.ExactArgs(2),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			return cl.do(ctx, "POST", path+"/hooks/"+args[1]+"/delete", map[string]any{}, nil)
		}),
	}
	hook.AddCommand(add, list, remove)
	notifications := &cobra.Command{
		Use: "notifications PROJECT", Short: "A project's notification deliveries, newest first, with their state and last error", Args: cobra.ExactArgs(1),
		RunE: inProject(g, nil, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			var out struct {
				Notifications []store.NotificationInfo `json:"notifications"`
			}
			if err := cl.do(ctx, "GET", path+"/notifications", nil, &out); err != nil {
				return err
			}
			return printTable(g, out.Notifications, "ID\tEVENT\tRUN\tTO\tSTATE\tATTEMPTS\tLAST ERROR", func(n store.NotificationInfo) []any {
				last := ""
				if n.LastError != nil {
					last = *n.LastError
				}
				return []any{n.ID, n.Event, fmt.Sprintf("#%d", n.RunNumber), n.HookHost, n.State, n.Attempts, last}
			})
		}),
	}
	return []*cobra.Command{hook, notifications}
}
