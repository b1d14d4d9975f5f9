package pipeline

import (
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

// checkoutScript is what a step `uses: actions/checkout@REF` runs: the
// workspace is the run's snapshot already, verified by its digest before
// the job starts, so there is nothing to fetch; the log says so. Its
// outputs are GitHub's: the commit and ref of what is in the workspace
// (the runner sets $FORGECI_OUTPUT for the steps feature, which a step
// with an id needs).
const checkoutScript = `echo "actions/checkout: nothing to fetch; the workspace is this run's snapshot, verified by its digest (it holds no .git)"
if [ -n "${FORGECI_OUTPUT:-}" ]; then printf 'commit=%s\nref=%s\n' "${FORGECI_SHA:-}" "${FORGECI_REF:-}" >> "$FORGECI_OUTPUT"; fi`

// checkoutIgnored are the inputs of actions/checkout that change nothing
// when nothing is fetched: with what credentials, what is kept, how.
var checkoutIgnored = map[string]bool{"persist-credentials": true, "clean": true, "show-progress": true,
	"set-safe-directory": true, "token": true, "ssh-key": true, "ssh-known-hosts": true, "ssh-strict": true,
	"ssh-user": true, "filter": true, "sparse-checkout-cone-mode": true, "allow-unsafe-pr-checkout": true}

// checkoutRefRE is the version a uses names: a tag, branch or commit.
var checkoutRefRE = domain.LazyRegexp(`^[A-Za-z0-9._/-]{1,255}$`)

// isCheckoutStep says whether st was made from actions/checkout: the
// defaults for run steps do not apply to it.
func isCheckoutStep(st domain.Step) bool { return st.Run == checkoutScript }

// checkoutUses says whether uses names actions/checkout (ASCII letters in
// any case, as GitHub reads an action's name), and whether with a version.
func checkoutUses(uses string) (checkout, versioned bool) {
	name, ref, _ := strings.Cut(uses, "@")
	if !asciiEqualFold(name, "actions/checkout") {
		return false, false
	}
	return true, checkoutRefRE().MatchString(ref)
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range len(s) {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// checkoutWith checks a checkout step's with: what would fetch another
// repository, ref, path, subset or history than the run's snapshot is
// refused; the rest must be single values and is not read.
func (p *parseState) checkoutWith(n ast.Node, path string) {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return
	}
	for _, kv := range kvs {
		key, kp := keyOf(kv), path+"."+keyOf(kv)
		s, single := p.checkoutValue(kv.Value, kp)
		if !single {
			continue
		}
		switch key {
		case "submodules", "lfs":
			if v := strings.ToLower(s); v == "true" || v == "recursive" || strings.Contains(s, "${{") {
				p.errorf(kv.Value, kp, "actions/checkout with %s is not supported: nothing is fetched but the run's snapshot; set it to false or leave it out", key)
			}
		case "fetch-depth":
			if s != "1" && s != "" {
				p.errorf(kv.Value, kp, "actions/checkout with fetch-depth %s is not supported: the workspace holds no .git, so no history; "+
					"leave it out, and use $GITHUB_SHA and $GITHUB_REF rather than git", s)
			}
		case "fetch-tags":
			if v := strings.ToLower(s); v != "false" && v != "" {
				p.errorf(kv.Value, kp, "actions/checkout with fetch-tags is not supported: the workspace holds no .git, so no tags; leave it out")
			}
		default:
			if !checkoutIgnored[key] {
				p.errorf(kv.Key, kp, "actions/checkout with %s is not supported: the workspace is the run's snapshot (its repository, at its commit, whole, "+
					"at the workspace's root); leave %s out, or fetch what else the job needs in a run step", key, key)
			}
		}
	}
}

// checkoutValue reads an input's value as text: a string, number,
// boolean or nothing (expressions checked), not a list or mapping.
func (p *parseState) checkoutValue(n ast.Node, kp string) (string, bool) {
	if _, null := unwrap(n).(*ast.NullNode); null || n == nil {
		return "", true
	}
	return p.str(n, kp)
}
