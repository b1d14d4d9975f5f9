package main

import (
	"context"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/forgeci/forgeci/shared/store"
)

// varCmd manages a project's variables: the vars context, not secret.
func varCmd(g *global) *cobra.Command {
	var project string
	c := &cobra.Command{Use: "var", Short: "Project variables (${{ vars.NAME }}): set, list, delete (admins set; members read; not secret)"}
	set := &cobra.Command{
		Use: "set NAME VALUE", Short: "Set a project variable: runs made after read it as ${{ vars.NAME }} (not secret: every run and member sees it)",
		Args: cobra.ExactArgs(2),
		RunE: inProject(g, &project, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			if err := cl.do(ctx, "POST", path+"/variables", map[string]any{"name": args[0], "value": args[1]}, nil); err != nil {
				return err
			}
			printf("variable %s of %s set: runs made from now on read it as ${{ vars.%s }}\n", args[0], project, args[0])
			return nil
		}),
	}
	list := &cobra.Command{
		Use: "list", Short: "List a project's variables with their values", Args: cobra.NoArgs,
		RunE: inProject(g, &project, func(ctx context.Context, cl *apiClient, path string, _ []string) error {
			vars, err := listAll[store.Variable](ctx, cl, path+"/variables", "variables", nil)
			if err != nil {
				return err
			}
			return printTable(g, vars, "NAME\tVALUE\tSET", func(v store.Variable) []any {
				return []any{v.Name, v.Value, v.UpdatedAt.Local().Format("2006-01-02 15:04")}
			})
		}),
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a project variable", Args: cobra.ExactArgs(1),
		RunE: inProject(g, &project, func(ctx context.Context, cl *apiClient, path string, args []string) error {
			return cl.do(ctx, "POST", path+"/variables/"+url.PathEscape(args[0])+"/delete", map[string]any{}, nil)
		}),
	}
	for _, sub := range []*cobra.Command{set, list, del} {
		sub.Flags().StringVarP(&project, "project", "p", "", "project")
		_ = sub.MarkFlagRequired("project")
	}
	c.AddCommand(set, list, del)
	return c
}
