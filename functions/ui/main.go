// Command ui is the ForgeCI Lambda function serving the web dashboard
// (api.Routes("ui"), registered by package ui). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	_ "github.com/forgeci/forgeci/shared/ui" // registers the dashboard's routes
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartHTTP(srv.Handler("ui"))
}
