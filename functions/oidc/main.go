// Command oidc is the ForgeCI Lambda function serving the "oidc" routes
// (see api.Routes("oidc") and template.yaml): the fenced id-token runner
// route, and the issuer's public discovery document, JWKS and lease
// introspection. Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartHTTP(srv.Handler("oidc"))
}
