package lambdaapp_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHeavyDependenciesStayPut: what only one function needs is linked
// into that function alone (each MiB of a bootstrap is cold-start time in
// every function): the identity-token signing code (JOSE, the issuer)
// into oidc.
func TestHeavyDependenciesStayPut(t *testing.T) {
	owners := map[string]string{
		"github.com/go-jose/go-jose/v4":             "oidc",
		"github.com/forgeci/forgeci/shared/idtoken": "oidc",
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
