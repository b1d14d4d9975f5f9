// Command source is the ForgeCI Lambda function serving the "source" routes
// (see api.Routes("source") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
)

func main() {
	srv := gateway.MustServer(context.Background(), lambdaapp.ConnectAtStart)
	gateway.StartHTTP(srv.Serve(api.SourceFunction))
}
