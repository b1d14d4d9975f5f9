// Command ui is the ForgeCI Lambda function serving the web dashboard
// (api.Routes("ui")). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartHTTP(srv.Handler("ui"))
}
