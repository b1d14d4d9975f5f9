package pipeline

import (
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// checkoutScript is what a step `uses: actions/checkout@REF` runs: the
// workspace is the run's snapshot already, verified by its digest before
// the job starts, so there is nothing to fetch; the log says so.
const checkoutScript = `echo "actions/checkout: nothing to fetch; the workspace is this run's snapshot, verified by its digest (it holds no .git)"`

// checkoutIgnored are the inputs of actions/checkout that change nothing
// when nothing is fetched: how deep, with what credentials, what is kept.
var checkoutIgnored = []string{"fetch-depth", "fetch-tags", "persist-credentials", "clean", "show-progress",
	"set-safe-directory", "token", "ssh-key", "ssh-known-hosts", "ssh-strict", "ssh-user"}

// checkoutOff are its inputs accepted only when false: the snapshot holds
// no submodule and no LFS object but what the repository commits.
var checkoutOff = []string{"submodules", "lfs"}

// isCheckout says whether uses names actions/checkout at some version.
func isCheckout(uses string) bool {
	name, ref, ok := strings.Cut(uses, "@")
	return ok && ref != "" && strings.EqualFold(name, "actions/checkout")
}

// checkoutWith checks a checkout step's with: what would fetch another
// repository, ref, path or subset than the run's snapshot is refused.
func (p *parseState) checkoutWith(n ast.Node, path string) {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return
	}
	for _, kv := range kvs {
		key, kp := keyOf(kv), path+"."+keyOf(kv)
		switch {
		case slices.Contains(checkoutIgnored, key):
		case slices.Contains(checkoutOff, key):
			if !isFalse(kv.Value) {
				p.errorf(kv.Value, kp, "actions/checkout with %s is not supported: the workspace is the run's snapshot, which holds no submodules or LFS objects; set it to false or leave it out", key)
			}
		default:
			p.errorf(kv.Key, kp, "actions/checkout with %s is not supported: the workspace is the run's snapshot (its repository, at its commit, whole, at the workspace's root); "+
				"leave %s out, or fetch what else the job needs in a run step", key, key)
		}
	}
}

// isFalse says whether n is false, written as a boolean or a string.
func isFalse(n ast.Node) bool {
	switch v := unwrap(n).(type) {
	case *ast.BoolNode:
		return !v.Value
	case *ast.StringNode:
		return strings.EqualFold(v.Value, "false")
	}
	return false
}
