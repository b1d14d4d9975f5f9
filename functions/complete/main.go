// Command complete is the ForgeCI Lambda function serving the "complete" routes
// (see api.Routes("complete") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background(), lambdaapp.ConnectAtStart)
	lambdaapp.StartHTTP(srv.Serve(api.CompleteFunction))
}
