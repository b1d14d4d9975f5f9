// Command scm is the ForgeCI Lambda function that turns recorded GitHub
// deliveries into runs and pushes job states to GitHub Check runs. It runs
// every minute and when the webhook function kicks it. Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/scm"
)

func main() {
	_ = lambdaapp.MustServer(context.Background())
	w := &scm.Worker{}
	lambdaapp.StartScheduled(w.RunOnce)
}
