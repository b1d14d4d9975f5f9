package pipeline

import (
	"fmt"
	"maps"
	"slices"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/goccy/go-yaml/ast"
)

// matrixKeyRE: an axis is named as in GitHub's workflows (node-version);
// in the environment its - becomes _ (FORGECI_MATRIX_NODE_VERSION).
var matrixKeyRE = domain.LazyRegexp(`^[A-Za-z_][A-Za-z0-9_-]{0,99}$`)

// strategy reads strategy: the matrix's combinations (axes multiplied,
// then exclude, then include, by GitHub's rules) and its keys in order;
// fail-fast (true unless said, as GitHub's) and max-parallel.
func (p *parseState) strategy(j *rawJob, n ast.Node, path string) {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return
	}
	for _, kv := range kvs {
		key, kp := keyOf(kv), path+"."+keyOf(kv)
		switch key {
		case "matrix":
			j.matrix, j.matrixKeys = p.matrix(kv.Value, kp)
		case "fail-fast":
			j.failFast = p.boolean(kv.Value, kp)
		case "max-parallel":
			if m, ok := p.integer(kv.Value, kp); ok && (m < 1 || m > MaxMatrix) {
				p.errorf(kv.Value, kp, "must be between 1 and %d", MaxMatrix)
			} else {
				j.maxParallel = m
			}
		default:
			p.errorf(kv.Key, kp, "unknown key %q (expected matrix, fail-fast or max-parallel)", key)
		}
	}
}

// matrix reads the axes, exclude and include of a matrix.
func (p *parseState) matrix(n ast.Node, mp string) ([]map[string]string, []string) {
	axes, ok := p.mapping(n, mp)
	if !ok {
		return nil, nil
	}
	combos := []map[string]string{{}}
	var keys []string
	var exclude, include []map[string]string
	var includeNode ast.Node
	for _, axis := range axes {
		name, ap := keyOf(axis), mp+"."+keyOf(axis)
		switch name {
		case "exclude":
			exclude = p.entries(axis.Value, ap)
			continue
		case "include":
			include, includeNode = p.entries(axis.Value, ap), axis.Value
			continue
		}
		values := p.axis(axis, ap)
		if values == nil {
			continue
		}
		keys = append(keys, name)
		combos = multiply(combos, name, values)
		if len(combos) > MaxMatrix {
			p.errorf(n, mp, "the matrix expands to more than %d jobs", MaxMatrix)
			return nil, nil
		}
	}
	if len(keys) == 0 && len(include) == 0 {
		p.errorf(n, mp, "a matrix needs at least one axis or include entry")
		return nil, nil
	}
	if len(keys) == 0 {
		combos = nil // only include: each entry is a combination
	}
	combos = excludeCombos(combos, exclude)
	combos, keys = includeCombos(combos, keys, include)
	if len(combos) == 0 {
		p.errorf(n, mp, "exclude removes every combination of the matrix")
	}
	if len(combos) > MaxMatrix {
		p.errorf(includeNode, mp, "the matrix expands to more than %d jobs", MaxMatrix)
		return nil, nil
	}
	return combos, keys
}

// axis reads one axis's values: an identifier's non-empty list, each once.
func (p *parseState) axis(axis *ast.MappingValueNode, ap string) []string {
	name := keyOf(axis)
	if !matrixKeyRE().MatchString(name) {
		p.errorf(axis.Key, ap, "matrix axis %q must be an identifier (letters, digits, _ and -)", name)
	}
	values := p.strList(axis.Value, ap)
	if len(values) == 0 {
		p.errorf(axis.Value, ap, "a matrix axis needs at least one value")
		return nil
	}
	dup := map[string]bool{}
	for _, v := range values {
		if dup[v] {
			p.errorf(axis.Value, ap, "value %q is listed twice", v)
		}
		dup[v] = true
	}
	return values
}

// entries reads exclude or include: a list of mappings of axis to value.
func (p *parseState) entries(n ast.Node, path string) []map[string]string {
	seq, ok := p.sequence(n, path)
	if !ok {
		return nil
	}
	if len(seq) > MaxMatrix {
		p.errorf(n, path, "at most %d entries", MaxMatrix)
		return nil
	}
	var out []map[string]string
	for i, el := range seq {
		ep := fmt.Sprintf("%s[%d]", path, i)
		kvs, ok := p.mapping(el, ep)
		if !ok {
			continue
		}
		m := map[string]string{}
		for _, kv := range kvs {
			k := keyOf(kv)
			if !matrixKeyRE().MatchString(k) {
				p.errorf(kv.Key, ep+"."+k, "matrix key %q must be an identifier (letters, digits, _ and -)", k)
			}
			if v, ok := p.str(kv.Value, ep+"."+k); ok {
				m[k] = v
			}
		}
		if len(m) == 0 {
			p.errorf(el, ep, "an entry needs at least one key")
			continue
		}
		out = append(out, m)
	}
	return out
}

func multiply(combos []map[string]string, name string, values []string) []map[string]string {
	var next []map[string]string
	for _, c := range combos {
		for _, v := range values {
			m := make(map[string]string, len(c)+1)
			for k, x := range c {
				m[k] = x
			}
			m[name] = v
			next = append(next, m)
		}
	}
	return next
}

// excludeCombos drops every combination that has all of an entry's pairs.
func excludeCombos(combos, exclude []map[string]string) []map[string]string {
	var out []map[string]string
	for _, c := range combos {
		drop := false
		for _, e := range exclude {
			drop = drop || matches(c, e)
		}
		if !drop {
			out = append(out, c)
		}
	}
	return out
}

func matches(c, entry map[string]string) bool {
	for k, v := range entry {
		if c[k] != v {
			return false
		}
	}
	return true
}

// includeCombos applies include as GitHub does: an entry's pairs are added
// to every combination whose original axes they do not overwrite (added
// values may be overwritten by a later entry); an entry added to none
// becomes a combination of its own. New keys join keys in order.
func includeCombos(combos []map[string]string, keys []string, include []map[string]string) ([]map[string]string, []string) {
	original := map[string]bool{}
	for _, k := range keys {
		original[k] = true
	}
	origCount := len(combos)
	for _, e := range include {
		added := false
		for _, c := range combos[:origCount] {
			if fits(c, e, original) {
				for k, v := range e {
					c[k] = v
				}
				added = true
			}
		}
		if !added {
			m := make(map[string]string, len(e))
			for k, v := range e {
				m[k] = v
			}
			combos = append(combos, m)
		}
		keys = addKeys(keys, e)
	}
	return combos, keys
}

// fits: the entry overwrites none of the combination's original values.
func fits(c, e map[string]string, original map[string]bool) bool {
	for k, v := range e {
		if original[k] && c[k] != v {
			return false
		}
	}
	return true
}

func addKeys(keys []string, e map[string]string) []string {
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(e)) {
		if !have[k] {
			keys = append(keys, k)
		}
	}
	return keys
}
