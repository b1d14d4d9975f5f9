// Command oidc is the ForgeCI Lambda function serving the "oidc" routes
// (see api.Routes("oidc") and template.yaml): the fenced id-token runner
// route, and the issuer's public discovery document, JWKS and lease
// introspection. Wiring only; it alone links the KMS signing code.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/idtoken"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
)

func main() {
	ctx := context.Background()
	// Lazily: its discovery and key routes are public and need no query.
	srv := gateway.MustServer(ctx, lambdaapp.ConnectLazily)
	// A KMS key signs the tokens (FORGECI_OIDC_*); without them, the
	// routes answer 503 unavailable.
	issuer, err := idtoken.FromEnv(ctx)
	lambdaapp.MustNot(srv.Log, "identity token issuer", err)
	if issuer != nil {
		srv.IDTokens = issuer
	}
	gateway.StartHTTP(srv.Serve(api.OIDCFunction))
}
