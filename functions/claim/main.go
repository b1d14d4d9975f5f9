// Command claim is the ForgeCI Lambda function serving the "claim" routes
// (see api.Routes("claim") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background(), lambdaapp.ConnectLazily)
	lambdaapp.StartHTTP(srv.Serve(api.ClaimFunction))
}
