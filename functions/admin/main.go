// Command admin is the ForgeCI Lambda function for operations without an
// HTTP route: registration tokens, users, listing and revoking runners
// (lambdaapp.Admin). It is invoked directly, with IAM credentials allowed
// lambda:InvokeFunction on it. Wiring only.
package main

import (
	"context"

	"github.com/forgeci/forgeci/shared/lambdaapp"
)

func main() {
	be := lambdaapp.MustBackend(context.Background(), lambdaapp.ConnectAtStart)
	lambdaapp.StartAdmin(be.Store)
}
