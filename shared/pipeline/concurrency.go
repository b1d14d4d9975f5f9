package pipeline

import (
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// groupContexts are what a concurrency group reads: it is evaluated by the
// control plane when it makes the run.
var groupContexts = []string{"forgeci", "github", "inputs", "vars"}

// concurrency reads concurrency: a group, or {group, cancel-in-progress};
// its group may read contexts.
func (p *parseState) concurrency(n ast.Node, path string, contexts []string) *domain.Concurrency {
	c := &domain.Concurrency{}
	if p.nodes == nil {
		p.nodes = map[string]ast.Node{}
	}
	if _, ok := unwrap(n).(*ast.MappingNode); !ok {
		c.Group = p.group(n, path, contexts)
		p.nodes[path+".group"] = n // where the expansion reports a problem
		return c
	}
	kvs, _ := p.mapping(n, path)
	p.keys(kvs, path, "group or cancel-in-progress", map[string]func(ast.Node, string){
		"group": func(v ast.Node, kp string) {
			c.Group = p.group(v, kp, contexts)
			p.nodes[kp] = v
		},
		"cancel-in-progress": func(v ast.Node, kp string) {
			if sn, ok := unwrap(v).(*ast.StringNode); ok && strings.Contains(sn.Value, "${{") {
				c.CancelExpr = p.cancelExpr(v, kp, contexts)
				p.nodes[kp] = v
			} else {
				c.CancelInProgress = p.boolean(v, kp)
			}
		},
	})
	if c.Group == "" {
		p.errorf(n, path+".group", "group is required")
	}
	return c
}

// group reads a concurrency group: text with expressions over contexts.
func (p *parseState) group(v ast.Node, kp string, contexts []string) string {
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
	return p.readsOnly(v, kp, s, tpl, contexts)
}

// cancelExpr reads a cancel-in-progress that is one ${{ }} expression
// over contexts, as GitHub's (${{ github.ref != 'refs/heads/main' }}).
func (p *parseState) cancelExpr(v ast.Node, kp string, contexts []string) string {
	s, ok := p.str(v, kp)
	if !ok {
		return ""
	}
	tpl, errs := expr.ParseTemplate(s)
	if len(errs) > 0 {
		return "" // checkExprs has said where
	}
	if !tpl.IsExpr() {
		p.errorf(v, kp, "is true, false or one ${{ }} expression")
		return ""
	}
	return p.readsOnly(v, kp, s, tpl, contexts)
}

// readsOnly is s, the template tpl of node v, if its expressions read
// only contexts (and facts that exist), else "" (said where).
func (p *parseState) readsOnly(v ast.Node, kp, s string, tpl *expr.Template, contexts []string) string {
	for _, piece := range tpl.Pieces() {
		if piece.Expr == nil {
			continue
		}
		err := piece.Expr.Allow(contexts...)
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

// MaxRunName bounds a run's name, as its pipeline's run-name makes it.
const MaxRunName = 200

// runName reads run-name: text, or a template over the contexts a
// concurrency group reads (forgeci/github, inputs), which the control
// plane evaluates when it makes the run.
func (p *parseState) runName(v ast.Node, kp string) string {
	s, ok := p.str(v, kp)
	if !ok {
		return ""
	}
	if len(s) > 4*MaxRunName {
		p.errorf(v, kp, "is %d bytes, over the limit of %d", len(s), 4*MaxRunName)
		return ""
	}
	if !strings.Contains(s, "${{") {
		return s
	}
	tpl, errs := expr.ParseTemplate(s)
	if len(errs) > 0 {
		return "" // checkExprs has said where
	}
	return p.readsOnly(v, kp, s, tpl, groupContexts)
}
