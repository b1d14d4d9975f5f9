package pipeline

import (
	"fmt"
	pathpkg "path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

func unwrap(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.TagNode:
			n = v.Value
		case *ast.AnchorNode:
			n = v.Value
		default:
			return n
		}
	}
}

func (p *parseState) mapping(n ast.Node, path string) ([]*ast.MappingValueNode, bool) {
	switch v := unwrap(n).(type) {
	case *ast.MappingNode:
		seen := map[string]bool{}
		for _, kv := range v.Values {
			k := keyOf(kv)
			if seen[k] {
				p.errorf(kv.Key, join(path, k), "key %q is repeated", k)
			}
			seen[k] = true
		}
		return v.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{v}, true
	case *ast.NullNode:
		return nil, true
	}
	p.errorf(n, path, "must be a mapping, not %s", kindOf(n))
	return nil, false
}

func (p *parseState) sequence(n ast.Node, path string) ([]ast.Node, bool) {
	if v, ok := unwrap(n).(*ast.SequenceNode); ok {
		return v.Values, true
	}
	p.errorf(n, path, "must be a list, not %s", kindOf(n))
	return nil, false
}

func (p *parseState) str(n ast.Node, path string) (string, bool) {
	switch v := unwrap(n).(type) {
	case *ast.StringNode:
		if strings.IndexByte(v.Value, 0) >= 0 {
			// An escape (\0, \x00) can write one; no job could hold it.
			p.errorf(n, path, "must not hold a NUL character")
			return "", false
		}
		p.checkExprs(n, path, v.Value)
		return v.Value, true
	case *ast.LiteralNode:
		p.checkExprs(n, path, v.Value.Value)
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return v.GetToken().Value, true
	}
	p.errorf(n, path, "must be a string, not %s", kindOf(n))
	return "", false
}

func (p *parseState) integer(n ast.Node, path string) (int, bool) {
	if v, ok := unwrap(n).(*ast.IntegerNode); ok {
		i, err := strconv.Atoi(v.GetToken().Value)
		if err == nil {
			return i, true
		}
	}
	p.errorf(n, path, "must be an integer, not %s", kindOf(n))
	return 0, false
}

// strList accepts a string or a list of strings.
func (p *parseState) strList(n ast.Node, path string) []string {
	if _, ok := unwrap(n).(*ast.SequenceNode); !ok {
		if s, ok := p.str(n, path); ok {
			return []string{s}
		}
		return nil
	}
	seq, _ := p.sequence(n, path)
	var out []string
	for i, e := range seq {
		if s, ok := p.str(e, fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parseState) relPaths(n ast.Node, path string) []string {
	paths := p.strList(n, path)
	for _, s := range paths {
		// Judged as cleaned: "./..", "a/../.." and "x/.." leave the
		// workspace or name its root.
		if c := pathpkg.Clean(s); s == "" || c == "." || !filepath.IsLocal(c) {
			p.errorf(n, path, "path %q must be relative and inside the workspace (not the workspace itself)", s)
		}
	}
	return paths
}

func (p *parseState) env(n ast.Node, path string) map[string]string {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	if len(kvs) > maxEnvVars {
		p.errorf(n, path, "holds %d variables, over the limit of %d", len(kvs), maxEnvVars)
		return nil
	}
	env := map[string]string{}
	for _, kv := range kvs {
		k := keyOf(kv)
		if !envKeyRE().MatchString(k) {
			p.errorf(kv.Key, path+"."+k, "environment variable name %q must be an identifier", k)
		} else if why := domain.ReservedVarReason(k); why != "" {
			p.errorf(kv.Key, path+"."+k, "%s", why)
		}
		if v, ok := p.str(kv.Value, path+"."+k); ok {
			if len(v) > maxEnvValueSize {
				p.errorf(kv.Value, path+"."+k, "value is over %d bytes", maxEnvValueSize)
			}
			env[k] = v
		}
	}
	return env
}

func keyOf(kv *ast.MappingValueNode) string {
	if kv.Key == nil {
		return ""
	}
	if s, ok := unwrap(kv.Key).(*ast.StringNode); ok {
		return s.Value
	}
	return kv.Key.GetToken().Value
}

func kindOf(n ast.Node) string {
	switch unwrap(n).(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode:
		return "an integer"
	case *ast.FloatNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.NullNode, nil:
		return "empty"
	case *ast.AliasNode:
		return "an alias (anchors and aliases are not supported)"
	}
	return "something else"
}

func mergeEnv(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func hasArtifact(as []domain.ArtifactSpec, name string) bool {
	for _, a := range as {
		if a.Name == name {
			return true
		}
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var yamlPosRE = domain.LazyRegexp(`\[(\d+):(\d+)\]`)

func yamlErrorPos(msg string) (int, int, bool) {
	m := yamlPosRE().FindStringSubmatch(msg)
	if m == nil {
		return 0, 0, false
	}
	l, _ := strconv.Atoi(m[1])
	c, _ := strconv.Atoi(m[2])
	return l, c, true
}
