// Command sweeper is the scheduled ForgeCI function that ends expired
// leases (store.Sweep) and fires the pipelines' schedules
// (store.FireSchedules). EventBridge invokes it every minute. Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartScheduled(func(ctx context.Context) error {
		res, err := srv.Store.Sweep(ctx)
		srv.Log.Info("sweep", "aborted", res.Aborted, "requeued", res.Requeued, "err", err)
		// One project's schedule that cannot fire is its own (the slot
		// says why): it does not fail the sweep.
		fired, ferr := srv.Store.FireSchedules(ctx)
		srv.Log.Info("schedules", "fired", fired.Fired, "skipped", fired.Skipped, "err", ferr)
		return err
	})
}
