// Command forgeci is the ForgeCI command line: the local stack (dev),
// migrations, and the service wrapper the Makefile runs tests under.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `forgeci: a low-ops CI system.

Usage:
  forgeci dev [flags]              start a local ForgeCI: PostgreSQL, every function's
                                   handler on its template route, the sweeper
  forgeci submit [flags]           snapshot a checkout, upload it and start a run
  forgeci migrate --database-url U apply pending migrations (idempotent)
  forgeci user create --database-url U --name N --role admin|write|read
                                   make a user and print its API token (once)
  forgeci repo add [flags]         register a GitHub repository (webhook secret, App installation)
  forgeci secret set [flags]       set a project secret, read from stdin
  forgeci deliveries [list|retry]  GitHub webhook deliveries: states, errors; retry a FAILED one
  forgeci services -- CMD [ARGS]   start throwaway servers for tests, run CMD with
                                   FORGECI_TEST_PG set, stop them

Run "forgeci COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "dev":
		err = devCommand(ctx, args)
	case "migrate":
		err = migrateCommand(ctx, args)
	case "submit":
		err = submitCommand(ctx, args)
	case "user":
		err = userCommand(ctx, args)
	case "repo":
		err = repoCommand(ctx, args)
	case "secret":
		err = secretCommand(ctx, args)
	case "deliveries":
		err = deliveriesCommand(ctx, args)
	case "services":
		err = servicesCommand(ctx, args)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "forgeci: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	var exit exitError
	switch {
	case errors.As(err, &exit):
		os.Exit(int(exit))
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "forgeci %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// exitError carries a child's exit status out of a command.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
