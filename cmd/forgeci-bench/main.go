// Command forgeci-bench runs ForgeCI's benchmarks and prints one table:
// each figure beside a baseline measured in the same run on the same
// machine, and their ratio. Machines are noisy; ratios hold, absolute
// numbers do not. `make bench` runs it under `forgeci services`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/schema"
	"github.com/forgeci/forgeci/shared/store"
)

// row is one line of the table.
type row struct {
	name     string
	figure   float64
	baseline float64
	unit     string
	// higherIsBetter decides how the ratio is taken: figure/baseline for
	// throughput, baseline/figure for latency, so that 1.0 means "as good
	// as the baseline" and the goal is always a lower bound.
	higherIsBetter bool
	goal           float64
	baselineName   string
	// errors, when positive, fails the goal whatever the ratio.
	errors int
	// atMost, with hasAtMost, is a goal on the figure itself (idle
	// figures whose goal is zero), in place of one on the ratio.
	atMost    float64
	hasAtMost bool
}

func (r row) ratio() float64 {
	if r.higherIsBetter {
		return r.figure / r.baseline
	}
	return r.baseline / r.figure
}

func main() {
	only := flag.String("only", "", "run only benchmarks whose name contains this")
	rounds := flag.Int("rounds", 3, "rounds per benchmark (the median is reported)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.DurationVar(&xminClean, "xmin-clean", xminClean, "pinned-xmin benchmark: length of the clean phase")
	flag.DurationVar(&xminPinned, "xmin-pinned", xminPinned, "pinned-xmin benchmark: how long the old snapshot is held")
	flag.DurationVar(&idleWindow, "idle-window", idleWindow, "idle benchmark: the window transactions are counted in")
	flag.DurationVar(&idleMinutes, "idle-for", idleMinutes, "idle benchmark: how long idle before the pickup measured")
	flag.BoolVar(&xminRaw, "xmin-raw", xminRaw, "pinned-xmin benchmark: also run the raw SKIP LOCKED queue under the same pin")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	ctx := context.Background()
	admin := os.Getenv("FORGECI_TEST_PG")
	var rows []row
	for _, b := range benchmarks {
		if *only != "" && !strings.Contains(b.name, *only) {
			continue
		}
		if admin == "" && !noDatabase[b.name] {
			fmt.Fprintln(os.Stderr, "forgeci-bench: FORGECI_TEST_PG is not set; run it as `make bench`")
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "running %s ...\n", b.name)
		rs, err := b.run(ctx, admin, *rounds)
		if err != nil {
			fmt.Fprintf(os.Stderr, "forgeci-bench: %s: %v\n", b.name, err)
			os.Exit(1)
		}
		rows = append(rows, rs...)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "benchmark\tfigure\tbaseline\tbaseline is\tratio\tgoal\t")
	for _, r := range rows {
		goal := "(figure only)"
		if r.hasAtMost {
			goal = fmt.Sprintf("figure ≤ %s ok", num(r.atMost))
			if r.figure > r.atMost {
				goal = fmt.Sprintf("figure ≤ %s ABOVE GOAL", num(r.atMost))
			}
		} else if r.goal > 0 {
			goal = fmt.Sprintf("≥ %.2f ok", r.goal)
			if r.ratio() < r.goal || r.errors > 0 {
				goal = fmt.Sprintf("≥ %.2f BELOW GOAL", r.goal)
			}
		}
		fmt.Fprintf(w, "%s\t%s %s\t%s %s\t%s\t%.2f\t%s\t\n",
			r.name, num(r.figure), r.unit, num(r.baseline), r.unit, r.baselineName, r.ratio(), goal)
	}
	w.Flush()
}

type benchmark struct {
	name string
	run  func(ctx context.Context, admin string, rounds int) ([]row, error)
}

var benchmarks = []benchmark{
	{"claim", benchClaim},
	{"lease-writes", benchLeaseWrites},
	{"claim-scale", benchClaimScale},
	{"invocations", benchInvocations},
	{"pinned-xmin", benchPinnedXmin},
	{"snapshot", benchSnapshot},
	{"pickup", benchPickup},
	{"pipeline", benchPipeline},
	{"gc", benchGC},
	{"pipeline-parse", benchParse},
	{"idle", benchIdle},
	{"scale-out", benchScaleOut},
}

// freshDatabase creates and migrates a database for one benchmark.
func freshDatabase(ctx context.Context, admin, name string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	url := strings.Replace(admin, "/postgres?", "/"+name+"?", 1)
	if _, err := schema.Migrate(ctx, url, nil); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	return url, func() {
		_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
		conn.Close(ctx)
	}, nil
}

// benchDB is a fresh, migrated database of one benchmark, with a pool and
// a store over it.
type benchDB struct {
	URL   string
	Pool  *pgxpool.Pool
	Store *store.Store
	drop  func()
}

func openDB(ctx context.Context, admin, name string, conns int32) (*benchDB, error) {
	url, drop, err := freshDatabase(ctx, admin, name)
	if err != nil {
		return nil, err
	}
	pool, err := store.OpenPool(ctx, url, store.PoolOptions{MaxConns: conns})
	if err != nil {
		drop()
		return nil, err
	}
	return &benchDB{URL: url, Pool: pool, Store: store.New(pool, store.Limits{}), drop: drop}, nil
}

// Close closes the pool and drops the database.
func (b *benchDB) Close() {
	b.Pool.Close()
	b.drop()
}

func median(xs []float64) float64 {
	s := append([]float64{}, xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// num prints a figure with at least three significant digits.
func num(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	case x >= 1:
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.3f", x)
}

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
