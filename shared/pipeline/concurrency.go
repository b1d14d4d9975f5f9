package pipeline

import (
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// groupContexts are what a concurrency group reads: it is evaluated by the
// control plane when it makes the run.
var groupContexts = []string{"forgeci", "github", "inputs"}

// concurrency reads concurrency: a group, or {group, cancel-in-progress}.
func (p *parseState) concurrency(n ast.Node, path string) *domain.Concurrency {
	c := &domain.Concurrency{}
	if _, ok := unwrap(n).(*ast.MappingNode); !ok {
		c.Group = p.group(n, path)
		return c
	}
	kvs, _ := p.mapping(n, path)
	p.keys(kvs, path, "group or cancel-in-progress", map[string]func(ast.Node, string){
		"group":              func(v ast.Node, kp string) { c.Group = p.group(v, kp) },
		"cancel-in-progress": func(v ast.Node, kp string) { c.CancelInProgress = p.boolean(v, kp) },
	})
	if c.Group == "" {
		p.errorf(n, path+".group", "group is required")
	}
	return c
}

// group reads a concurrency group: text with expressions over the run's
// facts and inputs.
func (p *parseState) group(v ast.Node, kp string) string {
	s, ok := p.str(v, kp)
	if !ok {
		return ""
	}
	if strings.TrimSpace(s) == "" || len(s) > 400 {
		p.errorf(v, kp, "a concurrency group is 1 to 400 characters")
		return ""
	}
	tpl, errs := expr.ParseTemplate(s)
	if len(errs) > 0 {
		return "" // checkExprs has said where
	}
	for _, piece := range tpl.Pieces() {
		if piece.Expr == nil {
			continue
		}
		err := piece.Expr.Allow(groupContexts...)
		if err == nil {
			err = checkFacts(piece.Expr)
		}
		if err != nil {
			p.errorAtOffset(v, kp, s, piece.Offset, "%s: %s", strings.TrimSpace(piece.Text), err.Message)
			return ""
		}
	}
	return s
}
