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
	srv := lambdaapp.MustServer(ctx, lambdaapp.ConnectLazily)
	// A GitHub project's schedule firing is a delivery: wake the scm
	// function for it rather than wait for its next pass.
	wakeSCM, err := kick.Lambda(ctx, os.Getenv("FORGECI_SCM_FUNCTION"), srv.Log)
	lambdaapp.MustNot(srv.Log, "lambda client", err)
	w := &scheduled.Sweeper{Store: srv.Store, Log: srv.Log, Wake: wakeSCM,
		Notifier: &notify.Deliverer{Store: srv.Store, Log: srv.Log, PublicURL: os.Getenv("FORGECI_PUBLIC_URL")}}
	lambdaapp.StartScheduled(func(ctx context.Context) error {
		ran, err := scheduled.Run(ctx, srv.Store, wake.Sweep, w.Pass)
		srv.Log.Info("sweeper", "ran", ran, "err", err)
		return err
	})
}
