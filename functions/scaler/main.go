// Command scaler is the scheduled ForgeCI function that sets the desired
// capacity of Auto Scaling groups of ephemeral runners from the queue
// (package scaling; FORGECI_SCALE_GROUPS). EventBridge invokes it every
// minute. Wiring only.
package main

import (
	"context"
	"os"
	"time"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/scaling"
)

func main() {
	be := lambdaapp.MustBackend(context.Background(), lambdaapp.ConnectLazily)
	groups, err := scaling.ParseGroups(os.Getenv("FORGECI_SCALE_GROUPS"))
	lambdaapp.MustNot(be.Log, "scale groups", err)
	asg, err := scaling.NewAutoScaling()
	lambdaapp.MustNot(be.Log, "auto scaling client", err)
	s := &scaling.Scaler{Store: be.Store, ASG: asg, Groups: groups, Log: be.Log, Now: time.Now}
	lambdaapp.StartScheduled(s.Run)
}
