// Command claim is the ForgeCI Lambda function serving the "claim" routes
// (see api.Routes("claim") and template.yaml). Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
)

func main() {
	srv := gateway.MustServer(context.Background(), lambdaapp.ConnectLazily)
	gateway.StartHTTP(srv.Serve(api.ClaimFunction))
}
