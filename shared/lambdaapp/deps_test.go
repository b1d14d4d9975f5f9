package lambdaapp_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestHeavyDependenciesStayPut: what only one function needs is linked
// into that function alone (each MiB of a bootstrap is cold-start time in
// every function): the identity-token signing code (JOSE, the issuer)
// into oidc, goose and the migrations into migrate.
func TestHeavyDependenciesStayPut(t *testing.T) {
	owners := map[string]string{
		"github.com/go-jose/go-jose/v4":             "oidc",
		"github.com/forgeci/forgeci/shared/idtoken": "oidc",
		"github.com/pressly/goose/v3":               "migrate",
		"github.com/forgeci/forgeci/shared/schema":  "migrate",
		"github.com/forgeci/forgeci/migrations":     "migrate",
	}
	dirs, err := os.ReadDir("../../functions")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		out, err := exec.Command("go", "list", "-deps", "../../functions/"+d.Name()).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", d.Name(), err)
		}
		deps := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			deps[p] = true
		}
		for pkg, owner := range owners {
			if deps[pkg] != (d.Name() == owner) {
				t.Errorf("functions/%s links %s: %v (only %s should)", d.Name(), pkg, deps[pkg], owner)
			}
		}
	}
}

// TestRoutelessFunctionsLinkNoAPI: the functions without an HTTP route
// build their backend with lambdaapp alone, so their cold starts do not
// initialise the API server's packages (the pipeline parser, the GitHub
// client, zstd), which lambdaapp would link if it built the API server.
// scm, the GitHub worker, needs the parser, the client and zstd itself.
func TestRoutelessFunctionsLinkNoAPI(t *testing.T) {
	for _, fn := range []string{"admin", "gc", "migrate", "scaler", "sweeper", "scm"} {
		out, err := exec.Command("go", "list", "-tags", "lambda.norpc", "-deps", "../../functions/"+fn).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", fn, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "github.com/forgeci/forgeci/shared/lambdaapp") {
			t.Fatalf("functions/%s does not link lambdaapp: is the check still right?", fn)
		}
		for _, pkg := range []string{"github.com/forgeci/forgeci/shared/api", "github.com/forgeci/forgeci/shared/lambdaapp/gateway",
			"github.com/forgeci/forgeci/shared/pipeline", "github.com/google/go-github/v62/github", "github.com/klauspost/compress/zstd"} {
			if slices.Contains(deps, pkg) && (fn != "scm" || strings.HasSuffix(pkg, "/api") || strings.HasSuffix(pkg, "/gateway")) {
				t.Errorf("functions/%s links %s", fn, pkg)
			}
		}
	}
}

// TestBootstrapLinksItsOwnHandlers: a bootstrap serves only its own
// routes, and links only their handlers: the heartbeat function carries
// no user-API handler (nor the pipeline parser those need), which a table
// of every route would keep in every bootstrap.
func TestBootstrapLinksItsOwnHandlers(t *testing.T) {
	bin := t.TempDir() + "/heartbeat"
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bin, "../../functions/heartbeat")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	syms := string(out)
	if !strings.Contains(syms, "shared/api.(*Server).heartbeat") {
		t.Fatal("the heartbeat bootstrap lacks its own handler: is the symbol check still right?")
	}
	for _, absent := range []string{"shared/api.(*Server).createRun", "shared/api.(*Server).githubWebhook", "shared/pipeline.Parse"} {
		if strings.Contains(syms, absent) {
			t.Errorf("the heartbeat bootstrap links %s", absent)
		}
	}
}
