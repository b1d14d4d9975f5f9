// Command api is the ForgeCI Lambda function serving the "api" routes
// (see api.Routes("api") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartHTTP(srv.Handler("api"))
}
