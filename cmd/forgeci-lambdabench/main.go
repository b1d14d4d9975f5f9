// Command forgeci-lambdabench measures ForgeCI's Lambda functions as they
// run: each bootstrap's size (linux/arm64, as deployed), and its cold first
// invoke and warm invokes under the Lambda Runtime Interface Emulator,
// against real PostgreSQL and S3, beside a hello-world bootstrap measured
// in the same run. `make bench` runs it under `forgeci services`.
//
// A cold invoke is the round trip of the first event sent to a fresh
// emulator: the emulator starts the bootstrap, which reads its secrets,
// opens its first database connection (at cold start, or at its first
// query: lambdaapp.ConnectAtStart) and serves the event. The emulator has
// no network or sandbox overhead of Lambda's, so the figures are a lower
// bound for Lambda's; the ratio to hello-world is what carries over.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/lambdaapp/lambdatest"
	"github.com/forgeci/forgeci/shared/localnet"
	"github.com/forgeci/forgeci/shared/schema"
	_ "github.com/forgeci/forgeci/shared/ui" // the dashboard registers its routes
)

// only, when set, names the functions measured.
var only string

// sizeGoal is the "≤ 15 MB", read as MiB (what ls -lh and the
// Lambda console show); the table also prints decimal megabytes.
const sizeGoal = 15 << 20

func main() {
	colds := flag.Int("cold", 15, "cold starts per function (the median is reported)")
	warms := flag.Int("warm", 50, "warm invokes per function")
	flag.StringVar(&only, "only", "", "measure only these functions (comma-separated), beside hello")
	flag.Parse()
	if err := run(context.Background(), *colds, *warms); err != nil {
		fmt.Fprintln(os.Stderr, "forgeci-lambdabench:", err)
		os.Exit(1)
	}
}

type result struct {
	name         string
	sizeArm64    int64
	sizeHere     int64
	cold         time.Duration // median
	helloCold    time.Duration // median of hello's, taken between this one's
	warm, warm90 time.Duration
}

func run(ctx context.Context, colds, warms int) error {
	admin := os.Getenv("FORGECI_TEST_PG")
	if admin == "" || os.Getenv("FORGECI_TEST_S3_ENDPOINT") == "" {
		return fmt.Errorf("FORGECI_TEST_PG and FORGECI_TEST_S3_* are not set; run it as `make bench`")
	}
	rie, err := lambdatest.RIE()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "forgeci-lambdabench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	arm, here, err := buildBootstraps(ctx, tmp)
	if err != nil {
		return err
	}
	dbURL, drop, err := benchDatabase(ctx, admin)
	if err != nil {
		return err
	}
	defer drop()
	blobs := cas.Config{Bucket: "lambdabench-" + localnet.RandomHex(4), Endpoint: os.Getenv("FORGECI_TEST_S3_ENDPOINT"),
		AccessKey: os.Getenv("FORGECI_TEST_S3_ACCESS_KEY"), SecretKey: os.Getenv("FORGECI_TEST_S3_SECRET_KEY"),
		Region: os.Getenv("FORGECI_TEST_S3_REGION")}
	if bs, err := cas.New(ctx, blobs); err != nil {
		return err
	} else if err := bs.EnsureBucket(ctx); err != nil {
		return err
	}
	env, sm, err := lambdatest.AWSEnv(dbURL, blobs)
	if err != nil {
		return err
	}
	defer sm.Close()
	// The migrate function answers CloudFormation here.
	cfn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer cfn.Close()

	names := make([]string, 0, len(here))
	for n := range here {
		if n != "hello" && (only == "" || slices.Contains(strings.Split(only, ","), n)) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var results []result
	// A function's cold starts alternate with hello's, one each, and its
	// ratio is to the hello cold starts taken between its own: the
	// machine's pace drifts over minutes, and a hello measured at another
	// time moved every ratio with it. hello's own row is the median of
	// them all.
	var helloCold []time.Duration
	hello := result{name: "hello", sizeArm64: size(arm["hello"]), sizeHere: size(here["hello"])}
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "measuring %s ...\n", name)
		r := result{name: name, sizeArm64: size(arm[name]), sizeHere: size(here[name])}
		cold, beside, warm, err := paired(ctx, rie, here[name], here["hello"], env, event(name, cfn.URL), colds, warms)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		helloCold = append(helloCold, beside...)
		r.cold, r.helloCold = quantile(cold, 0.5), quantile(beside, 0.5)
		r.warm, r.warm90 = quantile(warm, 0.5), quantile(warm, 0.9)
		results = append(results, r)
	}
	_, helloWarm, err := measure(ctx, rie, here["hello"], env, event("hello", cfn.URL), 1, warms)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	hello.cold = quantile(helloCold, 0.5)
	hello.helloCold = hello.cold
	hello.warm, hello.warm90 = quantile(helloWarm, 0.5), quantile(helloWarm, 0.9)
	results = append([]result{hello}, results...)
	printResults(results, colds, warms)
	return nil
}

// buildBootstraps builds every function's bootstrap (and hello's) for
// arm64, as deployed, and for this machine, to run here.
func buildBootstraps(ctx context.Context, tmp string) (arm, here map[string]string, err error) {
	root, err := lambdatest.ModuleRoot()
	if err != nil {
		return nil, nil, err
	}
	dirs, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, nil, err
	}
	pkgs := []string{"./shared/lambdaapp/lambdatest/hello"}
	for _, d := range dirs {
		pkgs = append(pkgs, "./functions/"+d.Name())
	}
	fmt.Fprintln(os.Stderr, "building bootstraps for linux/arm64 (deployed) and linux/"+runtime.GOARCH+" (run here) ...")
	if arm, err = lambdatest.Build(ctx, filepath.Join(tmp, "arm64"), "arm64", pkgs...); err != nil {
		return nil, nil, err
	}
	here, err = lambdatest.Build(ctx, filepath.Join(tmp, runtime.GOARCH), runtime.GOARCH, pkgs...)
	return arm, here, err
}

// benchDatabase makes a migrated database of its own; drop removes it.
func benchDatabase(ctx context.Context, admin string) (url string, drop func(), err error) {
	dbName := "lambdabench_" + localnet.RandomHex(6)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	drop = func() {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
		conn.Close(ctx)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	url = strings.Replace(admin, "/postgres?", "/"+dbName+"?", 1)
	if _, err := schema.Migrate(ctx, url, nil); err != nil {
		drop()
		return "", nil, err
	}
	return url, drop, nil
}

// paired takes bootstrap's cold starts one by one, each followed by one of
// hello's (beside), and then bootstrap's warm invokes.
func paired(ctx context.Context, rie, bootstrap, hello string, env []string, ev any, colds, warms int) (cold, beside, warm []time.Duration, err error) {
	for i := range colds {
		n := 0
		if i == colds-1 {
			n = warms
		}
		c, w, err := measure(ctx, rie, bootstrap, env, ev, 1, n)
		if err != nil {
			return nil, nil, nil, err
		}
		h, _, err := measure(ctx, rie, hello, env, event("hello", ""), 1, 0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("hello: %w", err)
		}
		cold, beside, warm = append(cold, c...), append(beside, h...), append(warm, w...)
	}
	return cold, beside, warm, nil
}

// measure invokes a bootstrap colds times, each in a fresh emulator, and
// then the last emulator warms times more.
func measure(ctx context.Context, rie, bootstrap string, env []string, ev any, colds, warms int) (cold, warm []time.Duration, err error) {
	for i := 0; i < colds; i++ {
		e, err := lambdatest.Start(ctx, rie, bootstrap, env)
		if err != nil {
			return nil, nil, err
		}
		n := 1
		if i == colds-1 {
			n += warms
		}
		for j := range n {
			_, took, err := e.Invoke(ctx, ev)
			if err != nil {
				e.Stop()
				return nil, nil, err
			}
			if j == 0 {
				cold = append(cold, took)
			} else {
				warm = append(warm, took)
			}
		}
		e.Stop()
	}
	return cold, warm, nil
}

func printResults(results []result, colds, warms int) {
	hello := results[0]
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "function\tarm64 bootstrap\t(MB)\t%s\tcold first invoke\t× hello\twarm p50\twarm p90\t× hello\t≤ 15 MiB\t\n", runtime.GOARCH)
	for _, r := range results {
		ok := "ok"
		if r.sizeArm64 > sizeGoal {
			ok = "OVER"
		}
		fmt.Fprintf(w, "%s\t%.2f MiB\t(%.2f)\t%.2f MiB\t%.1f ms\t%.1f\t%.2f ms\t%.2f ms\t%.1f\t%s\t\n", r.name, mb(r.sizeArm64), float64(r.sizeArm64)/1e6, mb(r.sizeHere),
			msf(r.cold), float64(r.cold)/float64(r.helloCold), msf(r.warm), msf(r.warm90), float64(r.warm)/float64(hello.warm), ok)
	}
	w.Flush()
	fmt.Printf("\ncold: median of %d fresh emulators, each ratio to the median of the %d hello cold starts taken between them\n"+
		"(hello's row: the median of them all); warm: %d sequential invokes of one; each function serves one\n"+
		"representative event (see cmd/forgeci-lambdabench): HTTP functions a request that authenticates against\n"+
		"PostgreSQL and is refused (401), scheduled functions a scheduled event, migrate a custom resource Update,\n"+
		"admin list-runners.\n", colds, colds, warms)
}

// event is the one event each function is measured with: for an HTTP
// function, its first route with a bearer token that does not exist (one
// authenticating query, then 401); a scheduled event for the sweeper and
// scm; a custom resource Update for migrate; list-runners for admin.
func event(name, responseURL string) any {
	switch name {
	case "migrate":
		return map[string]any{"RequestType": "Update", "RequestId": "bench", "ResponseURL": responseURL,
			"ResourceType": "Custom::Migrations", "LogicalResourceId": "Migrations", "PhysicalResourceId": "forgeci-migrations",
			"StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/forgeci/1", "ResourceProperties": map[string]any{}}
	case "admin":
		return map[string]any{"command": "list-runners"}
	case "sweeper", "scm", "gc", "scaler":
		return lambdatest.Scheduled("bench")
	}
	route, path := "POST /v1/runners/register", "/v1/runners/register"
	body := `{"registration_token":"frg_bench","name":"bench","labels":["linux"]}`
	if rs := api.Routes(name); len(rs) > 0 {
		route, path = rs[0].Method+" "+rs[0].Path, strings.NewReplacer("{job_id}", "00000000-0000-0000-0000-000000000000",
			"{run_id}", "00000000-0000-0000-0000-000000000000").Replace(rs[0].Path)
		if name != "register" {
			body = `{}`
		}
	}
	// A well-formed token of the kind the route takes, so that it is looked
	// up (a malformed one is refused without a query).
	token := "frt_" + strings.Repeat("x", 43)
	if name == "api" {
		token = "fru_" + strings.Repeat("x", 43)
	}
	return lambdatest.HTTPRequest("bench", route, path,
		map[string]string{"authorization": "Bearer " + token, "content-type": "application/json"}, body)
}

func size(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1)+0.5)]
}

func mb(n int64) float64          { return float64(n) / (1 << 20) }
func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
