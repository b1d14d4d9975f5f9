// Command api is the ForgeCI Lambda function serving the "api" routes
// (see api.Routes("api") and template.yaml). Wiring only.
package main

import (
	"context"
	"os"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
	"github.com/forgeci/forgeci/shared/scm/kick"
)

func main() {
	ctx := context.Background()
	srv := gateway.MustServer(ctx, lambdaapp.ConnectAtStart)
	// A GitHub project's manual run, or a retried delivery, is a
	// delivery: wake the scm function for it.
	wake, err := kick.Lambda(ctx, os.Getenv("FORGECI_SCM_FUNCTION"), srv.Log)
	lambdaapp.MustNot(srv.Log, "lambda client", err)
	srv.OnDelivery = wake
	gateway.StartHTTP(srv.Serve(api.APIFunction))
}
