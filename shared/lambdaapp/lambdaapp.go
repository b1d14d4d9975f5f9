// Package lambdaapp is what every functions/<name>/main.go shares: read the
// configuration from the environment and fail fast, read secrets (Secrets
// Manager in AWS, the environment elsewhere), and build the backend: one
// small pgx pool per container, the store, the CAS. The functions behind
// API Gateway add the API server (package gateway); the others link no
// more than this.
package lambdaapp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// Config is read from the environment.
type Config struct {
	DatabaseURL string        // see DatabaseURL
	LeaseTTL    time.Duration // FORGECI_LEASE_TTL_SECONDS
	// WakeGrain (FORGECI_WAKE_GRAIN_SECONDS, default 60) is the width of
	// a due note's slot (package wake): the scheduled functions' period.
	WakeGrain   time.Duration
	MaxLogBytes int64 // FORGECI_MAX_LOG_BYTES
	// FORGECI_MAX_RUN_LOG_BYTES, FORGECI_MAX_RUN_ARTIFACT_BYTES: what one
	// run's jobs may log and commit together.
	MaxRunLogBytes, MaxRunArtifactBytes int64
	// The CAS bucket (FORGECI_BUCKET). FORGECI_S3_ENDPOINT,
	// FORGECI_S3_ACCESS_KEY and FORGECI_S3_SECRET_KEY are only for
	// S3-compatible servers; in AWS the function's role is used.
	CAS cas.Config
	Log *slog.Logger
}

// LoadConfig reads the configuration, and the database credentials when
// they are a secret; a missing or malformed value is an error.
func LoadConfig(ctx context.Context) (Config, error) {
	cfg := Config{Log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	var err error
	if cfg.DatabaseURL, err = DatabaseURL(ctx); err != nil {
		return cfg, err
	}
	cfg.CAS = cas.Config{Bucket: os.Getenv("FORGECI_BUCKET"), Region: os.Getenv("AWS_REGION"),
		Endpoint: os.Getenv("FORGECI_S3_ENDPOINT"), AccessKey: os.Getenv("FORGECI_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("FORGECI_S3_SECRET_KEY")}
	if cfg.CAS.Bucket == "" {
		return cfg, fmt.Errorf("FORGECI_BUCKET is not set")
	}
	if cfg.WakeGrain, err = EnvSeconds("FORGECI_WAKE_GRAIN_SECONDS", 60, 3600); err != nil {
		return cfg, err
	}
	if v := os.Getenv("FORGECI_LEASE_TTL_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 || n > 3600 {
			return cfg, fmt.Errorf("FORGECI_LEASE_TTL_SECONDS must be an integer from 5 to 3600, got %q", v)
		}
		cfg.LeaseTTL = time.Duration(n) * time.Second
	}
	for name, into := range map[string]*int64{"FORGECI_MAX_LOG_BYTES": &cfg.MaxLogBytes,
		"FORGECI_MAX_RUN_LOG_BYTES": &cfg.MaxRunLogBytes, "FORGECI_MAX_RUN_ARTIFACT_BYTES": &cfg.MaxRunArtifactBytes} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1024 {
				return cfg, fmt.Errorf("%s must be an integer of at least 1024, got %q", name, v)
			}
			*into = n
		}
	}
	return cfg, nil
}

// Connect says when a function opens its first database connection.
type Connect int

const (
	// ConnectLazily opens it at the first query: for functions whose
	// events may need none (claim's idle polls, answered from the hint;
	// the scheduled passes with nothing due) and for those with public
	// routes that need none (the webhook's refusals, the dashboard's
	// sign-in page, the OIDC discovery document and keys, which scanners
	// ask for), whose cold starts must not wake a paused database.
	ConnectLazily Connect = iota
	// ConnectAtStart opens it in the background at cold start, while the
	// rest of the cold start and the event's delivery go on
	// (store.ConnectEarly): for functions whose events all query, bar a
	// request with no credentials at all.
	ConnectAtStart
)

// Backend is what a function's cold start builds: the store over the
// container's pool, the CAS, the log.
type Backend struct {
	Store *store.Store
	CAS   *cas.Store
	Log   *slog.Logger
}

// MustBackend builds the backend at cold start, or exits on a
// configuration it cannot use. An unreachable database is met by the
// first query, which answers its request with the error.
func MustBackend(ctx context.Context, connect Connect) Backend {
	var pre *store.PreDialed
	if connect == ConnectAtStart {
		pre = PreDialDatabase()
	}
	cfg, err := LoadConfig(ctx)
	if err != nil {
		fail(cfg.Log, "config", err)
	}
	opts, err := poolOptions()
	if err != nil {
		fail(cfg.Log, "database", err)
	}
	opts.PreDialed = pre
	pool, err := store.OpenPool(ctx, cfg.DatabaseURL, opts)
	if err != nil {
		fail(cfg.Log, "database", err)
	}
	st := store.New(pool, store.Limits{LeaseTTL: cfg.LeaseTTL, MaxLogBytes: cfg.MaxLogBytes,
		MaxRunLogBytes: cfg.MaxRunLogBytes, MaxRunArtifactBytes: cfg.MaxRunArtifactBytes})
	if connect == ConnectAtStart {
		st.ConnectEarly(func(err error) {
			cfg.Log.Warn("the database connection begun at cold start failed; the first query tries again", "err", err)
		})
	}
	// The master key of project secrets: KMS in AWS (FORGECI_KMS_KEY_ID).
	// Without one, secrets cannot be set and jobs that name them wait.
	keys, err := secretbox.FromEnv(ctx)
	if err != nil {
		fail(cfg.Log, "secrets master key", err)
	}
	if keys != nil {
		st.SetKeyring(keys)
	}
	blobs, err := cas.New(ctx, cfg.CAS)
	if err != nil {
		fail(cfg.Log, "cas", err)
	}
	st.SetObjects(blobs)
	st.SetBoard(wake.New(blobs, cfg.WakeGrain))
	// With a GitHub App, writes note the GitHub worker's work too.
	st.SetSCM(os.Getenv("FORGECI_SCM_ENABLED") == "1")
	return Backend{Store: st, CAS: blobs, Log: cfg.Log}
}

// PoolOptions shape the one pool of a container. A container serves one
// request at a time, so two connections are plenty; RDS Proxy multiplexes
// the containers. No statement cache and no startup settings, so
// the proxy neither pins sessions nor refuses the connection.
// A container opens its first connection at its first query (an idle
// poll or a pass with nothing due makes none), or at cold start for the
// functions that ConnectAtStart, and closes one idle for 5 seconds; the database also ends sessions idle for 10 (template.yaml),
// since a frozen container's timers do not run.
var PoolOptions = store.PoolOptions{MaxConns: 2, NoStatementCache: true, NoStartupSettings: true,
	IdleClose: 5 * time.Second, Lazy: true}

// StartScheduled runs fn for each scheduled (EventBridge) invocation.
func StartScheduled(fn func(ctx context.Context) error) {
	lambda.Start(func(ctx context.Context) error { return fn(ctx) })
}

// StartEvents runs fn for each invocation with the event's source ("" when
// it has none): "aws.events" for EventBridge's schedule, another for a
// function that invokes this one.
func StartEvents(fn func(ctx context.Context, source string) error) {
	lambda.Start(func(ctx context.Context, ev struct {
		Source string `json:"source"`
	}) error {
		return fn(ctx, ev.Source)
	})
}

// MustNot ends a cold start that failed in part what: err goes to the log
// and the process exits, so Lambda reports the init error. A nil err does
// nothing.
func MustNot(log *slog.Logger, what string, err error) {
	if err != nil {
		fail(log, what, err)
	}
}

func fail(log *slog.Logger, what string, err error) {
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	log.Error("cold start failed", "part", what, "err", err)
	os.Exit(1)
}

// EnvSeconds reads a whole number of seconds from 1 to max from the
// environment variable name, def when it is unset.
func EnvSeconds(name string, def, max int) (time.Duration, error) {
	n := def
	if s := os.Getenv(name); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > max {
			return 0, fmt.Errorf("%s must be an integer from 1 to %d, got %q", name, max, s)
		}
	}
	return time.Duration(n) * time.Second, nil
}
