// Command artifacts is the ForgeCI Lambda function serving the "artifacts" routes
// (see api.Routes("artifacts") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background(), lambdaapp.ConnectAtStart)
	lambdaapp.StartHTTP(srv.Serve(api.ArtifactsFunction))
}
