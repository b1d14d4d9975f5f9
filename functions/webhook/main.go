// Command webhook is the ForgeCI Lambda function that takes GitHub webhook
// deliveries (api.Routes("webhook")): it verifies the signature, records the
// delivery durably and answers at once; the scm function does the work.
// Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartHTTP(srv.Handler("webhook"))
}
