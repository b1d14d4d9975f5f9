package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/localstack"
	"github.com/forgeci/forgeci/shared/notify"
	"github.com/forgeci/forgeci/shared/pglocal"
	"github.com/forgeci/forgeci/shared/s3local"
	"github.com/forgeci/forgeci/shared/scheduled"
	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/scm"
	"github.com/forgeci/forgeci/shared/secretbox"
	"github.com/forgeci/forgeci/shared/store"
	_ "github.com/forgeci/forgeci/shared/ui" // the dashboard registers its routes
	"github.com/forgeci/forgeci/shared/wake"
)

// devOptions are the flags of forgeci dev.
type devOptions struct {
	Addr, Dir, InfoFile  string
	LeaseTTL, SweepEvery time.Duration
}

func devCommand(ctx context.Context, o devOptions) error {
	addr, dir, leaseTTL, sweepEvery, infoFile := &o.Addr, &o.Dir, &o.LeaseTTL, &o.SweepEvery, &o.InfoFile
	if host, _, err := net.SplitHostPort(*addr); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("--addr %q must be a loopback address such as 127.0.0.1:8080: the local stack has no TLS", *addr)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	pgLog, err := os.CreateTemp("", "forgeci-dev-pg-*.log")
	if err != nil {
		return err
	}
	defer pgLog.Close()
	fmt.Fprintln(os.Stderr, "forgeci dev: starting PostgreSQL and S3 (log:", pgLog.Name()+")")
	keyDir, dropKeys, err := devKeyDir(*dir)
	if err != nil {
		return err
	}
	defer dropKeys()
	stack, err := localstack.Start(ctx, localstack.Options{Dir: *dir, Log: pgLog, Limits: store.Limits{LeaseTTL: *leaseTTL},
		OIDCKeyFile: filepath.Join(keyDir, "oidc-key.pem")})
	if err != nil {
		return err
	}
	defer stack.Close()
	st := stack.Store
	keys, err := devKeyring(keyDir)
	if err != nil {
		return err
	}
	st.SetKeyring(keys)
	_, adminToken, err := st.CreateUser(ctx, "admin", store.RoleAdmin)
	if err != nil {
		return err
	}
	apiServer := stack.Server(log)
	apiServer.WebhookSecret = []byte(os.Getenv("FORGECI_GITHUB_WEBHOOK_SECRET"))
	if err := startSCMWorker(ctx, stack, apiServer, log); err != nil {
		return err
	}
	url, err := stack.Serve(*addr, apiServer)
	if err != nil {
		return err
	}
	go sweepLoop(ctx, st, *sweepEvery, log)

	token, expires, err := st.CreateRegistrationToken(ctx, 24*time.Hour, "forgeci dev", store.Scope{Untrusted: true})
	if err != nil {
		return err
	}
	if *infoFile != "" {
		info := fmt.Sprintf("FORGECI_URL=%s\nFORGECI_DATABASE_URL=%s\nFORGECI_REGISTRATION_TOKEN=%s\nFORGECI_TOKEN=%s\n",
			url, stack.DatabaseURL, token, adminToken)
		if err := writeFileAtomic(*infoFile, []byte(info)); err != nil {
			return err
		}
	}
	printf(`ForgeCI is running at %s (dashboard: open it and log in with the admin API token)
  database:  %s
  S3 (CAS):  %s, bucket forgeci
  sweeper:   every %s, lease TTL %s
  admin API token (for forgeci submit): %s

Register a runner with this one-time token (valid until %s):
  forgeci-runner register --server %s --registration-token %s --name my-box --labels linux
or by hand:
  curl -s -X POST %s/v1/runners/register -H 'Content-Type: application/json' \
    -d '{"registration_token":"%s","name":"my-box","labels":["linux"]}'

Press Ctrl-C to stop; the database is thrown away.
Submit this checkout:
  FORGECI_URL=%s FORGECI_TOKEN=%s forgeci submit --dir .
`, url, redactPassword(stack.DatabaseURL), stack.S3.Endpoint, *sweepEvery, *leaseTTL, adminToken, expires.Format(time.RFC3339), url, token, url, token, url, adminToken)

	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "forgeci dev: stopping")
	return nil
}

// startSCMWorker runs the scm worker here when a GitHub App is configured,
// woken by each new delivery as the webhook function kicks it in AWS.
func startSCMWorker(ctx context.Context, stack *localstack.Stack, apiServer *api.Server, log *slog.Logger) error {
	if os.Getenv("FORGECI_GITHUB_APP_ID") == "" {
		return nil
	}
	app, err := scm.AppFromEnv(os.Getenv("FORGECI_GITHUB_PRIVATE_KEY"))
	if err != nil {
		return err
	}
	kick := make(chan struct{}, 1)
	apiServer.OnDelivery = func(context.Context) error {
		select {
		case kick <- struct{}{}:
		default:
		}
		return nil
	}
	stack.Store.SetSCM(true)
	w := &scm.Worker{Store: stack.Store, CAS: stack.CAS, App: app, Log: log, PublicURL: os.Getenv("FORGECI_PUBLIC_URL")}
	go w.Loop(ctx, 5*time.Second, kick)
	return nil
}

// devKeyDir is where the local stack keeps its keys: --dir (kept with
// the database), or a temporary directory dropped at the end.
func devKeyDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "forgeci-dev-keys-")
	if err != nil {
		return "", func() {}, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// devKeyring is the master key of project secrets in the local stack: a
// key file in dir, unless FORGECI_KMS_KEY_ID or FORGECI_SECRETS_KEY_FILE
// names one. Identity tokens are signed by dir's oidc-key.pem.
func devKeyring(dir string) (secretbox.Keyring, error) {
	if k, err := secretbox.FromEnv(context.Background()); k != nil || err != nil {
		return k, err
	}
	return secretbox.NewFileKeyring(filepath.Join(dir, "secrets.key"), true)
}

// sweepLoop invokes the sweeper on a ticker, and the garbage collector
// every minute, as EventBridge does in AWS; each touches the database only
// when a wake-up hint says its work is due (scheduled.Run).
func sweepLoop(ctx context.Context, st *store.Store, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastGC := time.Now()
	// The local stack's hooks may be local too.
	sweeper := &scheduled.Sweeper{Store: st, Log: log,
		Notifier: &notify.Deliverer{Store: st, Log: log, PublicURL: os.Getenv("FORGECI_PUBLIC_URL"), AllowPrivate: true}}
	gc := scheduled.GC(st, 10*time.Second, log)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(lastGC) > time.Minute {
			lastGC = time.Now()
			if _, err := scheduled.Run(ctx, st, wake.GC, gc); err != nil && ctx.Err() == nil {
				log.Error("gc", "err", err)
			}
		}
		if _, err := scheduled.Run(ctx, st, wake.Sweep, sweeper.Pass); err != nil && ctx.Err() == nil {
			log.Error("sweeper", "err", err)
		}
	}
}

func migrateCommand(ctx context.Context, databaseURL string) error {
	url := &databaseURL
	if *url == "" {
		return errors.New("--database-url or FORGECI_DATABASE_URL is required")
	}
	keys, err := secretbox.FromEnv(ctx)
	if err != nil {
		return err
	}
	n, sealed, err := schema.MigrateAndSeal(ctx, *url, nil, keys)
	if err != nil {
		return err
	}
	printf("applied %d migration(s)\n", n)
	if sealed > 0 {
		printf("sealed %d project secret(s) that were stored in plain text\n", sealed)
	}
	return nil
}

// servicesCommand starts the servers tests need, runs a command with their
// addresses in the environment, and stops them whatever the command did.
func servicesCommand(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New("usage: forgeci services -- CMD [ARGS...]")
	}
	pgLog, err := os.CreateTemp("", "forgeci-test-pg-*.log")
	if err != nil {
		return err
	}
	defer pgLog.Close()
	cluster, err := pglocal.Start(ctx, pglocal.Options{Fast: true, Log: pgLog})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	s3, err := s3local.Start(ctx, "", pgLog)
	if err != nil {
		return err
	}
	defer s3.Stop()
	fmt.Fprintf(os.Stderr, "forgeci services: PostgreSQL on 127.0.0.1:%d, S3 (versitygw) on %s (log %s)\n",
		cluster.Port, s3.Endpoint, pgLog.Name())
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(append(os.Environ(), "FORGECI_TEST_PG="+cluster.URL), s3.Env()...)
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitError(ee.ExitCode())
	}
	return err
}

func writeFileAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func redactPassword(url string) string {
	at := strings.LastIndex(url, "@")
	colon := strings.Index(url, "://")
	if at < 0 || colon < 0 {
		return url
	}
	user := url[colon+3 : at]
	if i := strings.Index(user, ":"); i >= 0 {
		return url[:colon+3] + user[:i] + ":***" + url[at:]
	}
	return url
}

func userCreate(ctx context.Context, databaseURL, name, role string) error {
	if databaseURL == "" {
		return errors.New("--database-url or FORGECI_DATABASE_URL is required")
	}
	url := &databaseURL
	pool, err := store.OpenPool(ctx, *url, store.PoolOptions{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	u, token, err := store.New(pool, store.Limits{}).CreateUser(ctx, name, role)
	if err != nil {
		return err
	}
	printf("user %s (%s) created; API token, shown only now:\n%s\n", u.Name, u.Role, token)
	return nil
}
