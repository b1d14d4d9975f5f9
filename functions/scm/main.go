// Command scm is the ForgeCI Lambda function that turns recorded GitHub
// deliveries into runs and pushes job states to GitHub Check runs. It runs
// every minute and when the webhook function kicks it, and touches the
// database only when a wake-up hint says work is due (scheduled.Run). Wiring only.
package main

import (
	"context"
	"os"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/scm"
	"github.com/forgeci/forgeci/shared/wake"
)

func main() {
	ctx := context.Background()
	be := lambdaapp.MustBackend(ctx, lambdaapp.ConnectLazily)
	w := &scm.Worker{Store: be.Store, CAS: be.CAS, Log: be.Log,
		PublicURL: os.Getenv("FORGECI_PUBLIC_URL"), TempDir: os.TempDir()}
	key, err := lambdaapp.Secret(ctx, "FORGECI_GITHUB_PRIVATE_KEY")
	if err == nil {
		var app *scm.App
		app, err = scm.AppFromEnv(key)
		w.App = app
	}
	lambdaapp.MustNot(be.Log, "github", err)
	lambdaapp.StartEvents(func(ctx context.Context, source string) error {
		if source != "aws.events" {
			// Kicked by a function that recorded a delivery.
			return scheduled.RunKicked(ctx, be.Store, wake.SCM, w.Pass)
		}
		ran, err := scheduled.Run(ctx, be.Store, wake.SCM, w.Pass)
		be.Log.Info("scm", "ran", ran, "err", err)
		return err
	})
}
