package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/forgeci/forgeci/runner/agent"
)

// idToken is what a step runs to get an identity token from its job's
// socket: the token alone on stdout, so that
// TOKEN=$("$FORGECI_RUNNER_BIN" id-token --audience sts.amazonaws.com)
// works; with --json the whole answer ({"token", "expires_at"}).
func idToken(args []string) error {
	fs := flag.NewFlagSet("id-token", flag.ContinueOnError)
	audience := fs.String("audience", "", "who the token is for, such as sts.amazonaws.com (required)")
	socket := fs.String("socket", os.Getenv(agent.IDTokenSocketEnv), "the job's identity-token socket (default $"+agent.IDTokenSocketEnv+")")
	asJSON := fs.Bool("json", false, "print the whole answer as JSON: token and expires_at")
	check := fs.String("check", "", "instead of printing the token, verify it as a relying party would, against this issuer's discovery document and JWKS, and introspect it there (such as $"+agent.ServerURLEnv+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *audience == "" || fs.NArg() > 0 {
		return errors.New("usage: forgeci-runner id-token --audience AUDIENCE [--socket PATH] [--json | --check ISSUER]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := agent.FetchIDToken(ctx, *socket, *audience)
	if err != nil {
		return err
	}
	switch {
	case *check != "":
		return checkToken(ctx, *check, *audience, tok.Token)
	case *asJSON:
		return json.NewEncoder(os.Stdout).Encode(tok)
	}
	_, err = fmt.Println(tok.Token)
	return err
}
