// Package migrator is the migrate function: the handler of the template's
// Custom::Migrations resource. It is apart from package lambdaapp so that
// goose (package schema) is linked into this function only.
package migrator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
)

// migrationsResourceID is the physical ID of the Migrations custom
// resource. It never changes, so an update never makes CloudFormation
// delete the "old" resource.
const migrationsResourceID = "forgeci-migrations"

// Migrations is the handler of the template's Custom::Migrations resource:
// on Create and Update it applies every pending migration (schema.Migrate is
// idempotent and holds an advisory lock); on Delete it does nothing, since
// the database outlives the resource. Unlike lambdaapp.MustBackend it never exits at
// cold start: CloudFormation waits up to an hour for an answer, so every
// failure, including a missing secret, must come back as a FAILED response.
// early is the connection Start began at cold start (nil: none).
func Migrations(ctx context.Context, ev cfn.Event, early *EarlyDB) (physicalID string, data map[string]any, err error) {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if ev.RequestType == cfn.RequestDelete {
		early.discard()
		log.Info("migrations resource deleted; the database is left as it is")
		return ev.PhysicalResourceID, nil, nil
	}
	// Leave time to send the answer before Lambda's own timeout.
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-10*time.Second))
		defer cancel()
	}
	url, pool, earlyErr := early.take(ctx)
	if pool != nil {
		defer pool.Close()
	}
	if ctx.Err() != nil {
		return migrationsResourceID, nil, fmt.Errorf("the database connection begun at cold start did not come up in the time left: %w", ctx.Err())
	}
	if pool == nil {
		// No early connection, or it failed (the database resuming, say):
		// try again within this event's time, and report what fails.
		if earlyErr != nil {
			log.Warn("the connection begun at cold start failed; trying again", "err", earlyErr)
		}
		if url, err = lambdaapp.DatabaseURL(ctx); err != nil {
			return migrationsResourceID, nil, err
		}
		if pool, err = schema.OpenPool(ctx, url, nil); err != nil {
			return migrationsResourceID, nil, err
		}
		defer pool.Close()
	}
	keys, err := secretbox.FromEnv(ctx)
	if err != nil {
		return migrationsResourceID, nil, err
	}
	applied, sealed, err := schema.MigrateAndSealWith(ctx, pool, url, log, keys)
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

// EarlyDB is the migrate function's connection, begun at cold start so
// that reading the credentials and connecting overlap the runtime's
// fetching the event. A Delete (the stack going, or a failed create
// rolled back) does not wait for it but cannot stop it either: the
// function's events come with deploys, never while the stack is idle. The first event takes it; later events of the same
// container connect afresh, since a connection left idle in a frozen
// container may be closed by the database in between.
type EarlyDB struct {
	done  chan struct{}
	taken sync.Once
	url   string
	pool  *pgxpool.Pool
	err   error
}

// ConnectEarly reads the database URL and opens the migration pool in the
// background.
func ConnectEarly() *EarlyDB {
	e := &EarlyDB{done: make(chan struct{})}
	pre := lambdaapp.PreDialDatabase()
	go func() {
		defer close(e.done)
		// A panic here would end the process unanswered, and CloudFormation
		// would wait an hour: it becomes this connection's error instead.
		defer func() {
			if r := recover(); r != nil {
				e.err = fmt.Errorf("connecting at cold start: panic: %v", r)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), store.ConnectTimeout+10*time.Second)
		defer cancel()
		// Whatever happens, a pre-dialed connection not taken is closed
		// (OpenPool connects: once it has opened, the connection was taken).
		defer pre.Release()
		if e.url, e.err = lambdaapp.DatabaseURL(ctx); e.err == nil {
			e.pool, e.err = schema.OpenPool(ctx, e.url, pre)
		}
	}()
	return e
}

// take waits for the early connection and hands it to the first caller;
// later callers, and a nil e, get nothing.
func (e *EarlyDB) take(ctx context.Context) (url string, pool *pgxpool.Pool, err error) {
	if e == nil {
		return "", nil, nil
	}
	e.taken.Do(func() {
		select {
		case <-e.done:
			url, pool, err = e.url, e.pool, e.err
		case <-ctx.Done():
			e.closeWhenDone() // this event connects itself
		}
	})
	return url, pool, err
}

// discard lets the early connection go unused, when the first event needs
// none (a Delete): it is closed whenever it comes, and not waited for.
func (e *EarlyDB) discard() {
	if e != nil {
		e.taken.Do(e.closeWhenDone)
	}
}

func (e *EarlyDB) closeWhenDone() {
	go func() {
		<-e.done
		if e.pool != nil {
			e.pool.Close()
		}
	}()
}

// Start serves the Custom::Migrations resource, answering
// CloudFormation (SUCCESS or FAILED) through the event's presigned
// response URL. It does not return.
func Start() {
	early := ConnectEarly()
	lambda.Start(cfn.LambdaWrap(func(ctx context.Context, ev cfn.Event) (string, map[string]any, error) {
		return Migrations(ctx, ev, early)
	}))
}
