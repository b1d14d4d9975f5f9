package pipeline

import (
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// environment reads a job's environment: a name, or {name, url}, each text
// with expressions over what a job's concurrency group reads (the control
// plane evaluates them when the job's needs end, docs/deployments.md).
func (p *parseState) environment(n ast.Node, path string) *domain.EnvironmentSpec {
	if p.nodes == nil {
		p.nodes = map[string]ast.Node{}
	}
	env := &domain.EnvironmentSpec{}
	if _, ok := unwrap(n).(*ast.MappingNode); !ok {
		env.Name = p.envText(n, path+".name", 64)
		p.nodes[path+".name"] = n
		return env
	}
	kvs, _ := p.mapping(n, path)
	p.keys(kvs, path, "name or url", map[string]func(ast.Node, string){
		"name": func(v ast.Node, kp string) { env.Name = p.envText(v, kp, 64); p.nodes[kp] = v },
		"url":  func(v ast.Node, kp string) { env.URL = p.envText(v, kp, 2048); p.nodes[kp] = v },
	})
	if env.Name == "" {
		p.errorf(n, path+".name", "name is required")
		return nil
	}
	return env
}

// envText reads an environment's name or URL: a literal name is checked
// here, one with expressions when it is evaluated.
func (p *parseState) envText(v ast.Node, kp string, maxLen int) string {
	s, ok := p.str(v, kp)
	if !ok {
		return ""
	}
	if !strings.Contains(s, "${{") {
		if strings.HasSuffix(kp, ".name") && !domain.EnvironmentNameRE().MatchString(strings.ToLower(s)) {
			p.errorf(v, kp, "environment name %q must be 1 to 64 letters, digits, _ . or -, starting with a letter or digit", s)
			return ""
		}
		if len(s) > maxLen {
			p.errorf(v, kp, "is %d characters, over the limit of %d", len(s), maxLen)
			return ""
		}
		return s
	}
	tpl, errs := expr.ParseTemplate(s)
	if len(errs) > 0 {
		return "" // checkExprs has said where
	}
	return p.readsOnly(v, kp, s, tpl, jobGroupContexts)
}

// expandEnvironment fills in the matrix of this combination; the control
// plane evaluates the rest, so what it reads of needs is not the runner's.
func (p *parseState) expandEnvironment(j *rawJob, job *Job, combo map[string]string) {
	if j.environment == nil {
		return
	}
	reads := p.readsNeeds
	at := place{runner: jobGroupContexts}
	env := &domain.EnvironmentSpec{Name: p.substitute(j, j.path+".environment.name", j.environment.Name, combo, at)}
	if j.environment.URL != "" {
		env.URL = p.substitute(j, j.path+".environment.url", j.environment.URL, combo, at)
	}
	p.readsNeeds = reads
	if !strings.Contains(env.Name, "${{") && !domain.EnvironmentNameRE().MatchString(strings.ToLower(env.Name)) {
		kp := j.path + ".environment.name"
		p.errorf(p.nodes[kp], kp, "is %q here: an environment name is 1 to 64 letters, digits, _ . or -", env.Name)
	}
	job.Spec.Environment = env
}

// permissions reads permissions: GitHub's token scopes. ForgeCI gives a
// job no GitHub token, so the scopes take nothing away; they are checked
// and accepted. id-token: write (or write-all) lets the job ask for
// identity tokens bound to its lease; it reports whether they ask.
func (p *parseState) permissions(n ast.Node, path string) bool {
	if s, ok := unwrap(n).(*ast.StringNode); ok {
		if s.Value != "read-all" && s.Value != "write-all" {
			p.errorf(n, path, "is read-all, write-all or a mapping of scopes")
		}
		return s.Value == "write-all"
	}
	kvs, ok := p.mapping(n, path)
	if !ok {
		return false
	}
	idToken := false
	for _, kv := range kvs {
		scope, kp := keyOf(kv), path+"."+keyOf(kv)
		v, _ := p.str(kv.Value, kp)
		switch {
		case !slices.Contains(permissionScopes, scope):
			p.errorf(kv.Key, kp, "unknown permission %q", scope)
		case v != "read" && v != "write" && v != "none":
			p.errorf(kv.Value, kp, "is read, write or none")
		case scope == "id-token" && v == "write":
			idToken = true
		case scope == "id-token" && v == "read":
			p.errorf(kv.Value, kp, "is write or none: a token is asked for, not read")
		}
	}
	return idToken
}
