// Command logs is the ForgeCI Lambda function serving the "logs" routes
// (see api.Routes("logs") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background(), lambdaapp.ConnectAtStart)
	lambdaapp.StartHTTP(srv.Serve(api.LogsFunction))
}
