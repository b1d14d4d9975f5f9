// Command sweeper is the scheduled ForgeCI function that ends expired
// leases (store.Sweep), fires the pipelines' schedules
// (store.FireSchedules) and delivers notifications (notify). EventBridge
// invokes it every minute; it touches the database only when a wake-up
// hint says something is due (scheduled.Run). Wiring only.
package main

import (
	"context"
	"os"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/notify"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/scm/kick"
	"github.com/forgeci/forgeci/shared/wake"
)

func main() {
	ctx := context.Background()
	be := lambdaapp.MustBackend(ctx, lambdaapp.ConnectLazily)
	// A GitHub project's schedule firing is a delivery: wake the scm
	// function for it rather than wait for its next pass.
	wakeSCM, err := kick.Lambda(ctx, os.Getenv("FORGECI_SCM_FUNCTION"), be.Log)
	lambdaapp.MustNot(be.Log, "lambda client", err)
	w := &scheduled.Sweeper{Store: be.Store, Log: be.Log, Wake: wakeSCM,
		Notifier: &notify.Deliverer{Store: be.Store, Log: be.Log, PublicURL: os.Getenv("FORGECI_PUBLIC_URL")}}
	lambdaapp.StartScheduled(func(ctx context.Context) error {
		ran, err := scheduled.Run(ctx, be.Store, wake.Sweep, w.Pass)
		be.Log.Info("sweeper", "ran", ran, "err", err)
		return err
	})
}
