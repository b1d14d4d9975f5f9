// Command forgeci-chaos runs ForgeCI under faults for a while and then
// checks, offline, that no invariant of the lease protocol was broken
// (package chaos says which). `make chaos` runs it under forgeci services.
//
//	forgeci-chaos [-duration 5m] [-runners 4] [-dir DIR] [-seed N] [-db-clock +5m]
//	forgeci-chaos -check DIR     re-check a finished run's ops.jsonl and dump.json
//
// It prints the counts and every violation, and exits 1 if there was one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/forgeci/forgeci/chaos"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/s3local"
)

func main() {
	check := flag.String("check", "", "only check the run logged in this directory")
	dir := flag.String("dir", "", "directory for the run's logs (default: a new temporary directory, kept)")
	duration := flag.Duration("duration", 5*time.Minute, "how long to inject faults")
	settle := flag.Duration("settle", 2*time.Minute, "how long runs may take to finish after the faults stop")
	runners := flag.Int("runners", 4, "runner processes")
	concurrency := flag.Int("concurrency", 2, "jobs per runner")
	lease := flag.Duration("lease-ttl", 4*time.Second, "lease lifetime")
	sweep := flag.Duration("sweep-every", 500*time.Millisecond, "sweeper interval")
	inflight := flag.Int("in-flight", 8, "runs kept unfinished at once")
	seed := flag.Uint64("seed", 0, "random seed (default: random; printed)")
	dbClock := flag.String("db-clock", "", `libfaketime offset for PostgreSQL's clock, e.g. "+5m" or "-5m"`)
	noFaults := flag.Bool("no-faults", false, "inject nothing (a baseline run)")
	flag.Parse()

	if *check != "" {
		ops, err := chaos.ReadOps(filepath.Join(*check, "ops.jsonl"))
		if err != nil {
			fail(err)
		}
		d, err := chaos.LoadDump(filepath.Join(*check, "dump.json"))
		if err != nil {
			fail(err)
		}
		report(chaos.Check(ops, d))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s3 := cas.Config{Endpoint: os.Getenv("FORGECI_TEST_S3_ENDPOINT"), AccessKey: os.Getenv("FORGECI_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("FORGECI_TEST_S3_SECRET_KEY"), Region: os.Getenv("FORGECI_TEST_S3_REGION")}
	if s3.Endpoint == "" {
		srv, err := s3local.Start(ctx, "", nil)
		if err != nil {
			fail(err)
		}
		defer srv.Stop()
		s3 = cas.Config{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region}
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "forgeci-chaos-")
		if err != nil {
			fail(err)
		}
		*dir = d
	}
	faults := chaos.DefaultFaults()
	if *noFaults {
		faults = chaos.Faults{}
	}
	rep, err := chaos.Run(ctx, chaos.Config{Dir: *dir, Duration: *duration, Settle: *settle, Runners: *runners,
		Concurrency: *concurrency, LeaseTTL: *lease, SweepEvery: *sweep, InFlight: *inflight, Seed: *seed,
		S3: s3, DBClock: *dbClock, Faults: faults, Progress: os.Stderr})
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "forgeci-chaos: logs in %s (re-check with -check %s)\n", *dir, *dir)
	report(rep)
}

func report(rep *chaos.Report) {
	fmt.Print(rep.String())
	if !rep.OK() {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "forgeci-chaos:", err)
	os.Exit(2)
}
