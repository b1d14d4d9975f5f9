// Command webhook is the ForgeCI Lambda function that takes GitHub webhook
// deliveries (api.Routes("webhook")): it verifies the signature, records the
// delivery durably, kicks the scm function and answers at once. Wiring only.
package main

import (
	"context"
	"errors"
	"os"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/gateway"
	"github.com/forgeci/forgeci/shared/scm/kick"
)

func main() {
	ctx := context.Background()
	srv := gateway.MustServer(ctx, lambdaapp.ConnectLazily)
	// The App's webhook secret is optional: repository webhooks carry their own.
	var err error
	if os.Getenv("FORGECI_GITHUB_WEBHOOK_SECRET_SECRET_ARN")+os.Getenv("FORGECI_GITHUB_WEBHOOK_SECRET") != "" {
		var secret string
		secret, err = lambdaapp.Secret(ctx, "FORGECI_GITHUB_WEBHOOK_SECRET")
		srv.WebhookSecret = []byte(secret)
	}
	kick, kerr := kick.Lambda(ctx, os.Getenv("FORGECI_SCM_FUNCTION"), srv.Log)
	lambdaapp.MustNot(srv.Log, "secret or lambda client", errors.Join(err, kerr))
	srv.OnDelivery = kick
	gateway.StartHTTP(srv.Serve(api.WebhookFunction))
}
