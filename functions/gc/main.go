// Command gc is the scheduled ForgeCI function that keeps storage flat
// (store.CollectGarbage: runs past retention, idle and over-quota caches,
// uncommitted uploads, unreferenced blobs). EventBridge invokes it every
// ten minutes; it touches the database only after writes marked it, or a
// day after its last pass (scheduled.GC), in bounded batches. Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/wake"
)

func main() {
	be := lambdaapp.MustBackend(context.Background(), lambdaapp.ConnectLazily)
	pass := scheduled.GC(be.Store, 0, be.Log)
	lambdaapp.StartScheduled(func(ctx context.Context) error {
		ran, err := scheduled.Run(ctx, be.Store, wake.GC, pass)
		be.Log.Info("gc", "ran", ran, "err", err)
		return err
	})
}
