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
)

func main() {
	ctx := context.Background()
	// Its discovery and key routes need no query, but relying parties
	// fetch them while a job presents a token, when the database is
	// awake anyway; the id-token and introspection routes query.
	srv := lambdaapp.MustServer(ctx, lambdaapp.ConnectAtStart)
	// A KMS key signs the tokens (FORGECI_OIDC_*); without them, the
	// routes answer 503 unavailable.
	issuer, err := idtoken.FromEnv(ctx)
	lambdaapp.MustNot(srv.Log, "identity token issuer", err)
	if issuer != nil {
		srv.IDTokens = issuer
	}
	lambdaapp.StartHTTP(srv.Serve(api.OIDCFunction))
}
