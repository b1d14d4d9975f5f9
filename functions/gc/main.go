// Command gc is the scheduled ForgeCI function that keeps storage flat
// (store.CollectGarbage: runs past retention, idle and over-quota caches,
// uncommitted uploads, unreferenced blobs). EventBridge invokes it every
// ten minutes; each invocation works in bounded batches. Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/store"
)

func main() {
	srv := lambdaapp.MustServer(context.Background())
	lambdaapp.StartScheduled(func(ctx context.Context) error {
		res, err := srv.Store.CollectGarbage(ctx, store.GCOptions{})
		srv.Log.Info("gc", "runs", res.Runs, "deliveries", res.Deliveries, "caches_idle", res.CachesIdle,
			"caches_over_quota", res.CachesOverQuota, "uploads", res.Uploads, "blobs", res.Blobs,
			"blob_bytes", res.BlobBytes, "done", res.Done, "err", err)
		return err
	})
}
