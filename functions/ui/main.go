// Command ui is the ForgeCI Lambda function serving the web dashboard
// (api.Routes("ui"), registered by package ui). Wiring only.
package main

import (
	"context"
	"os"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
	"github.com/forgeci/forgeci/shared/scm/kick"
	_ "github.com/forgeci/forgeci/shared/ui" // registers the dashboard's routes
)

func main() {
	ctx := context.Background()
	srv := gateway.MustServer(ctx, lambdaapp.ConnectLazily)
	// A GitHub project's run from the Run form is a delivery: wake the
	// scm function for it.
	wake, err := kick.Lambda(ctx, os.Getenv("FORGECI_SCM_FUNCTION"), srv.Log)
	lambdaapp.MustNot(srv.Log, "lambda client", err)
	srv.OnDelivery = wake
	gateway.StartHTTP(srv.Serve(api.Registered("ui")))
}
