// Command logs is the ForgeCI Lambda function serving the "logs" routes
// (see api.Routes("logs") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
)

func main() {
	srv := gateway.MustServer(context.Background(), lambdaapp.ConnectAtStart)
	gateway.StartHTTP(srv.Serve(api.LogsFunction))
}
