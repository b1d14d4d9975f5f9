// Package localstack assembles ForgeCI's control plane on one machine:
// PostgreSQL (a cluster of its own, or a database the caller names), an
// S3-compatible server (versitygw, or one the caller names), the store and
// the content-addressed store over them, and every HTTP function behind
// one listener, as API Gateway routes them in AWS. forgeci dev (and so
// the demo and the end-to-end tests, which run it), the chaos harness and
// the benchmarks all build their stacks here.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/idtoken"
	"github.com/forgeci/forgeci/shared/pglocal"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/s3local"
	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// Options of one stack. The zero value starts a temporary PostgreSQL
// cluster and versitygw, and a bucket named forgeci.
type Options struct {
	// Dir keeps the cluster's and S3's data (under Dir and Dir/s3); empty
	// for temporary ones.
	Dir string
	// Log receives PostgreSQL's and versitygw's output; nil for none.
	Log *os.File
	// PG overrides the cluster's options (Dir and Log are set from here).
	PG pglocal.Options
	// Database, when set, is created in the cluster and used instead of
	// the cluster's default database.
	Database string
	// DatabaseURL, when set, is an existing database to use: no cluster
	// is started.
	DatabaseURL string
	// Prepare runs after the migrations, before the pool opens (the chaos
	// harness installs its audit triggers here).
	Prepare func(ctx context.Context, databaseURL string) error
	// S3, when its Endpoint is set, is an existing S3 server to use: no
	// versitygw is started. Bucket, PresignExpiry are taken from it too.
	S3 cas.Config
	// WrapS3, when set, puts something between the stack and S3 (the
	// chaos harness's fault proxy): it gets S3's endpoint and returns the
	// one to use instead.
	WrapS3 func(endpoint string) (string, error)
	Limits store.Limits
	// MaxConns bounds the pool (default 40).
	MaxConns int32
	// WakeGrain is the width of a due note's slot (package wake; default
	// one second). NoBoard runs without wake-up hints: every poll and
	// pass asks PostgreSQL.
	WakeGrain time.Duration
	NoBoard   bool
	// KeepIdleConns keeps idle connections open (as before pools closed
	// them after 5 s; benchmarks' baseline).
	KeepIdleConns bool
	// OIDCKeyFile, when set, makes Serve issue identity tokens signed by
	// this RSA key file (made when absent), with the served URL as issuer.
	OIDCKeyFile string
}

// Stack is a running control plane without its HTTP listener (Serve).
type Stack struct {
	Cluster     *pglocal.Cluster // nil with Options.DatabaseURL
	DatabaseURL string
	Pool        *pgxpool.Pool
	Store       *store.Store
	CAS         *cas.Store
	S3          cas.Config // as the stack reaches it (after WrapS3)
	closers     []func()
	oidcKeyFile string
}

// Start starts a stack; Close stops what it started. On error, whatever
// was started is stopped.
func Start(ctx context.Context, o Options) (*Stack, error) {
	s := &Stack{}
	err := s.startDatabase(ctx, o)
	if err == nil {
		err = s.startS3(ctx, o)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Store.SetObjects(s.CAS)
	if !o.NoBoard {
		s.Store.SetBoard(wake.New(s.CAS, cmp(o.WakeGrain, time.Second)))
	}
	return s, nil
}

func (s *Stack) startDatabase(ctx context.Context, o Options) error {
	s.DatabaseURL = o.DatabaseURL
	s.oidcKeyFile = o.OIDCKeyFile
	if s.DatabaseURL == "" {
		pg := o.PG
		pg.Dir, pg.Log = o.Dir, o.Log
		c, err := pglocal.Start(ctx, pg)
		if err != nil {
			return err
		}
		s.Cluster = c
		s.closers = append(s.closers, c.Stop)
		s.DatabaseURL = c.URL
		if o.Database != "" {
			if err := createDatabase(ctx, c.URL, o.Database); err != nil {
				return err
			}
			s.DatabaseURL = c.DatabaseURL(o.Database)
		}
	}
	if _, err := schema.Migrate(ctx, s.DatabaseURL, nil); err != nil {
		return err
	}
	if o.Prepare != nil {
		if err := o.Prepare(ctx, s.DatabaseURL); err != nil {
			return err
		}
	}
	idle := 5 * time.Second
	if o.KeepIdleConns {
		idle = 0
	}
	pool, err := store.OpenPool(ctx, s.DatabaseURL, store.PoolOptions{MaxConns: cmp(o.MaxConns, 40), IdleClose: idle})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, pool.Close)
	s.Pool = pool
	s.Store = store.New(pool, o.Limits)
	return nil
}

func createDatabase(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func (s *Stack) startS3(ctx context.Context, o Options) error {
	s.S3 = o.S3
	if s.S3.Endpoint == "" {
		dir := ""
		if o.Dir != "" {
			dir = filepath.Join(o.Dir, "s3")
		}
		srv, err := s3local.Start(ctx, dir, o.Log)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, srv.Stop)
		s.S3.Endpoint, s.S3.AccessKey, s.S3.SecretKey, s.S3.Region = srv.Endpoint, srv.AccessKey, srv.SecretKey, srv.Region
	}
	if s.S3.Bucket == "" {
		s.S3.Bucket = "forgeci"
	}
	if o.WrapS3 != nil {
		ep, err := o.WrapS3(s.S3.Endpoint)
		if err != nil {
			return err
		}
		s.S3.Endpoint = ep
	}
	blobs, err := cas.New(ctx, s.S3)
	if err != nil {
		return err
	}
	if err := blobs.EnsureBucket(ctx); err != nil {
		return err
	}
	s.CAS = blobs
	return nil
}

// Server is the API server of every function over this stack.
func (s *Stack) Server(log *slog.Logger) *api.Server {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// Idle polls are held open here (no per-millisecond bill), and woken
	// by this process queueing a job.
	return &api.Server{Store: s.Store, CAS: s.CAS, Log: log, Polls: api.Polls{Hold: protocol.MaxClaimWait}}
}

// Serve serves srv's handler on addr ("127.0.0.1:0" for any port) until
// Close, and returns its base URL.
func (s *Stack) Serve(addr string, srv *api.Server) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	url := "http://" + ln.Addr().String()
	if s.oidcKeyFile != "" && srv.IDTokens == nil {
		// The issuer is the URL served, known only now.
		issuer, err := idtoken.NewKeyFile(url, s.oidcKeyFile)
		if err != nil {
			_ = ln.Close()
			return "", err
		}
		srv.IDTokens = issuer
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			srv.Log.Error("serve", "err", err)
		}
	}()
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	})
	return url, nil
}

// Close stops what the stack started, last first.
func (s *Stack) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

func cmp[T int32 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
