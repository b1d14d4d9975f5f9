package pipeline

import (
	"path/filepath"

	"github.com/goccy/go-yaml/ast"
)

// runDefaults are defaults.run, of the file or a job: the shell and the
// working directory of steps that name none.
type runDefaults struct {
	shell []string
	dir   string
}

// over is d with what o sets replacing it (a job's over the file's).
func (d runDefaults) over(o runDefaults) runDefaults {
	if o.shell != nil {
		d.shell = o.shell
	}
	if o.dir != "" {
		d.dir = o.dir
	}
	return d
}

// defaults reads defaults: {run: {shell, working-directory}}.
func (p *parseState) defaults(n ast.Node, path string) runDefaults {
	var d runDefaults
	kvs, ok := p.mapping(n, path)
	if !ok {
		return d
	}
	p.keys(kvs, path, "run", map[string]func(ast.Node, string){
		"run": func(v ast.Node, rp string) {
			run, ok := p.mapping(v, rp)
			if !ok {
				return
			}
			p.keys(run, rp, "shell or working-directory", map[string]func(ast.Node, string){
				"shell":             func(v ast.Node, kp string) { d.shell = p.shell(v, kp) },
				"working-directory": func(v ast.Node, kp string) { d.dir = p.workDir(v, kp) },
			})
		},
	})
	return d
}

// workDir reads a working-directory: relative, inside the workspace.
func (p *parseState) workDir(v ast.Node, kp string) string {
	d, ok := p.str(v, kp)
	if !ok {
		return ""
	}
	c := filepath.Clean(d)
	if !filepath.IsLocal(c) {
		p.errorf(v, kp, "must be a relative path inside the workspace")
		return ""
	}
	return c
}

// permissionScopes are the GITHUB_TOKEN's scopes a workflow may set.
var permissionScopes = []string{"actions", "attestations", "checks", "contents", "deployments", "discussions",
	"id-token", "issues", "models", "packages", "pages", "pull-requests", "repository-projects",
	"security-events", "statuses"}
