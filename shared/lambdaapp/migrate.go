package lambdaapp

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

// migrationsResourceID is the physical ID of the Migrations custom
// resource. It never changes, so an update never makes CloudFormation
// delete the "old" resource.
const migrationsResourceID = "forgeci-migrations"

// Migrations is the handler of the template's Custom::Migrations resource:
// on Create and Update it applies every pending migration (store.Migrate is
// idempotent and holds an advisory lock); on Delete it does nothing, since
// the database outlives the resource. Unlike MustServer it never exits at
// cold start: CloudFormation waits up to an hour for an answer, so every
// failure, including a missing secret, must come back as a FAILED response.
func Migrations(ctx context.Context, ev cfn.Event) (physicalID string, data map[string]any, err error) {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if ev.RequestType == cfn.RequestDelete {
		log.Info("migrations resource deleted; the database is left as it is")
		return ev.PhysicalResourceID, nil, nil
	}
	// Leave time to send the answer before Lambda's own timeout.
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-10*time.Second))
		defer cancel()
	}
	url, err := DatabaseURL(ctx)
	if err != nil {
		return migrationsResourceID, nil, err
	}
	keys, err := secretbox.FromEnv(ctx)
	if err != nil {
		return migrationsResourceID, nil, err
	}
	applied, sealed, err := store.MigrateAndSeal(ctx, url, log, keys)
	log.Info("migrations", "request", ev.RequestType, "applied", applied, "sealed_secrets", sealed, "err", err)
	if err != nil {
		return migrationsResourceID, nil, err
	}
	// The default shape's functions log in by IAM token as this user.
	if user := os.Getenv("FORGECI_DATABASE_IAM_USER"); user != "" {
		if err := store.EnsureIAMUser(ctx, url, user); err != nil {
			return migrationsResourceID, nil, err
		}
	}
	return migrationsResourceID, map[string]any{"Applied": applied, "SealedSecrets": sealed}, nil
}

// StartCustomResource runs fn for CloudFormation custom resource events,
// answering CloudFormation (SUCCESS or FAILED) through the event's
// presigned response URL. It does not return.
func StartCustomResource(fn cfn.CustomResourceFunction) {
	lambda.Start(cfn.LambdaWrap(fn))
}
