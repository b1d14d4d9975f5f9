// Command sweeper is the scheduled ForgeCI function that ends expired
// leases (store.Sweep), fires the pipelines' schedules
// (store.FireSchedules) and delivers notifications (notify). EventBridge
// invokes it every minute. Wiring only.
package main

import (
	"context"
	"os"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/notify"
	"github.com/forgeci/forgeci/shared/scm/kick"
)

func main() {
	ctx := context.Background()
	srv := lambdaapp.MustServer(ctx)
	// A GitHub project's schedule firing is a delivery: wake the scm
	// function for it rather than wait for its next pass.
	wake, err := kick.Lambda(ctx, os.Getenv("FORGECI_SCM_FUNCTION"), srv.Log)
	lambdaapp.MustNot(srv.Log, "lambda client", err)
	notifier := &notify.Deliverer{Store: srv.Store, Log: srv.Log, PublicURL: os.Getenv("FORGECI_PUBLIC_URL")}
	lambdaapp.StartScheduled(func(ctx context.Context) error {
		res, err := srv.Store.Sweep(ctx)
		srv.Log.Info("sweep", "aborted", res.Aborted, "requeued", res.Requeued, "err", err)
		// One project's schedule that cannot fire is its own (the slot
		// says why): it does not fail the sweep.
		fired, ferr := srv.Store.FireSchedules(ctx)
		srv.Log.Info("schedules", "fired", fired.Fired, "skipped", fired.Skipped, "left", fired.Left, "err", ferr)
		if fired.Fired > 0 && wake != nil {
			wake(ctx)
		}
		// Notifications of runs that ended; each failure is its own
		// (retried, then shown FAILED), not the sweep's.
		sent, nerr := notifier.RunOnce(ctx)
		srv.Log.Info("notifications", "sent", sent.Sent, "failed", sent.Failed, "err", nerr)
		return err
	})
}
