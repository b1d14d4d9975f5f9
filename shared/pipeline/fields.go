package pipeline

import (
	"fmt"
	pathpkg "path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/goccy/go-yaml/ast"

	"github.com/forgeci/forgeci/shared/domain"
)

func (p *parseState) steps(n ast.Node, path string) []domain.Step {
	seq, ok := p.sequence(n, path)
	if !ok {
		return nil
	}
	if len(seq) == 0 {
		p.errorf(n, path, "at least one step is required")
	}
	if len(seq) > MaxSteps {
		p.errorf(n, path, "at most %d steps are allowed", MaxSteps)
	}
	steps := eachMapping(p, seq, path, p.step)
	ids := map[string]bool{}
	for i, st := range steps {
		if st.ID != "" && ids[st.ID] {
			p.errorf(seq[i], fmt.Sprintf("%s[%d].id", path, i), "step id %q is used twice in this job", st.ID)
		}
		ids[st.ID] = true
	}
	return steps
}

func (p *parseState) artifacts(n ast.Node, path string) []domain.ArtifactSpec {
	seen := map[string]bool{}
	return mappingList(p, n, path, func(an ast.Node, ap string, kvs []*ast.MappingValueNode) domain.ArtifactSpec {
		var a domain.ArtifactSpec
		p.keys(kvs, ap, "name or paths", map[string]func(ast.Node, string){
			"name":  func(v ast.Node, kp string) { a.Name, _ = p.str(v, kp) },
			"paths": func(v ast.Node, kp string) { a.Paths = p.relPaths(v, kp) },
		})
		if !artifactNameRE().MatchString(a.Name) {
			p.errorf(an, ap+".name", "artifact name %q must hold only letters, digits and . _ - (at most 128)", a.Name)
		}
		if seen[a.Name] {
			p.errorf(an, ap+".name", "artifact %q is declared twice", a.Name)
		}
		if a.Name == domain.ReportArtifact {
			p.errorf(an, ap+".name", "artifact name %q is the test reports' (reports:)", a.Name)
		}
		seen[a.Name] = true
		if len(a.Paths) == 0 {
			p.errorf(an, ap+".paths", "paths is required")
		}
		return a
	})
}

func (p *parseState) downloads(n ast.Node, path string) []domain.NeedArtifact {
	return mappingList(p, n, path, func(dn ast.Node, dp string, kvs []*ast.MappingValueNode) domain.NeedArtifact {
		var d domain.NeedArtifact
		p.keys(kvs, dp, "job or name", map[string]func(ast.Node, string){
			"job":  func(v ast.Node, kp string) { d.Job, _ = p.str(v, kp) },
			"name": func(v ast.Node, kp string) { d.Name, _ = p.str(v, kp) },
		})
		if d.Job == "" || d.Name == "" {
			p.errorf(dn, dp, "job and name are required")
		}
		return d
	})
}

// mappingList reads n as a list of mappings, each entry with read.
func mappingList[T any](p *parseState, n ast.Node, path string, read func(n ast.Node, path string, kvs []*ast.MappingValueNode) T) []T {
	seq, ok := p.sequence(n, path)
	if !ok {
		return nil
	}
	return eachMapping(p, seq, path, read)
}

// eachMapping reads each entry of a list of mappings with read, given the
// entry's node, its path (list[i]) and its keys. An entry that is not a
// mapping is reported by p.mapping and left out.
func eachMapping[T any](p *parseState, seq []ast.Node, path string, read func(n ast.Node, path string, kvs []*ast.MappingValueNode) T) []T {
	var out []T
	for i, n := range seq {
		ip := fmt.Sprintf("%s[%d]", path, i)
		kvs, ok := p.mapping(n, ip)
		if !ok {
			continue
		}
		out = append(out, read(n, ip, kvs))
	}
	return out
}

// keys hands each key's value and path to its reader in read, and reports
// a key that has none as unknown, naming the expected ones.
func (p *parseState) keys(kvs []*ast.MappingValueNode, path, expected string, read map[string]func(v ast.Node, path string)) {
	for _, kv := range kvs {
		key := keyOf(kv)
		r, ok := read[key]
		if !ok {
			p.errorf(kv.Key, path+"."+key, "unknown key %q (expected %s)", key, expected)
			continue
		}
		r(kv.Value, path+"."+key)
	}
}

func (p *parseState) cache(n ast.Node, path string) *domain.CacheSpec {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	c := &domain.CacheSpec{}
	p.keys(kvs, path, "key, restore-keys or paths", map[string]func(ast.Node, string){
		"key":          func(v ast.Node, kp string) { c.Key, _ = p.str(v, kp) },
		"restore-keys": func(v ast.Node, kp string) { c.RestoreKeys = p.strList(v, kp) },
		"paths":        func(v ast.Node, kp string) { c.Paths = p.relPaths(v, kp) },
	})
	if c.Key == "" || len(c.Key) > 512 {
		p.errorf(n, path+".key", "key is required (at most 512 characters)")
	}
	if len(c.Paths) == 0 {
		p.errorf(n, path+".paths", "paths is required")
	}
	if len(c.RestoreKeys) > 15 {
		p.errorf(n, path+".restore-keys", "at most 15 restore keys are allowed")
	}
	return c
}

func (p *parseState) retry(n ast.Node, path string) (lost, failed int) {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return 0, 0
	}
	for _, kv := range kvs {
		key := keyOf(kv)
		v, ok := p.integer(kv.Value, path+"."+key)
		if ok && (v < 0 || v > MaxRetries) {
			p.errorf(kv.Value, path+"."+key, "must be between 0 and %d", MaxRetries)
		}
		switch key {
		case "lease-lost":
			lost = v
		case "failed":
			failed = v
		default:
			p.errorf(kv.Key, path+"."+key, "unknown key %q (expected lease-lost or failed)", key)
		}
	}
	return lost, failed
}

// limits is a job's limits: {memory: 2G, processes: 512, cpus: 1.5}.
func (p *parseState) limits(n ast.Node, path string) *domain.JobLimits {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	lim := &domain.JobLimits{}
	for _, kv := range kvs {
		key := keyOf(kv)
		kp := path + "." + key
		switch key {
		case "memory":
			if s, ok := p.str(kv.Value, kp); ok {
				v, err := domain.ParseBytes(s)
				if err != nil || v < 16<<20 {
					p.errorf(kv.Value, kp, "must be a size of at least 16M, such as 512M or 4G")
				}
				lim.MemoryBytes = v
			}
		case "processes":
			if v, ok := p.integer(kv.Value, kp); ok {
				if v < 8 || v > 1<<20 {
					p.errorf(kv.Value, kp, "must be between 8 and %d", 1<<20)
				}
				lim.Processes = v
			}
		case "cpus":
			if s, ok := p.str(kv.Value, kp); ok {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil || v < 0.01 || v > 1024 {
					p.errorf(kv.Value, kp, "must be a number of CPUs from 0.01 to 1024, such as 1.5")
				}
				lim.CPUs = v
			}
		default:
			p.errorf(kv.Key, kp, "unknown key %q (expected memory, processes or cpus)", key)
		}
	}
	return lim
}

// checkCycles reports, at the needs of the job that closes it, each cycle
// domain.NeedCycles finds. A job that needs itself is reported as such
// already, so its own name is left out of its needs here.
func (p *parseState) checkCycles(raws []*rawJob) {
	names := make([]string, len(raws))
	for i, j := range raws {
		names[i] = j.name
	}
	needs := func(i int) []string {
		var out []string
		for _, n := range raws[i].needs {
			if n != raws[i].name {
				out = append(out, n)
			}
		}
		return out
	}
	for _, c := range domain.NeedCycles(names, needs) {
		j := raws[c.Job]
		p.errorf(j.needsNode, j.path+".needs", "needs form a cycle: %s", strings.Join(c.Path, " -> "))
	}
}

// maxReportGlobs bounds a job's report patterns.
const maxReportGlobs = 20

// reports reads reports: {junit: [globs]}: workspace patterns (doublestar,
// ** crossing directories) of JUnit XML files the runner reads when the
// steps end.
func (p *parseState) reports(n ast.Node, path string) *domain.ReportsSpec {
	kvs, ok := p.mapping(n, path)
	if !ok {
		return nil
	}
	r := &domain.ReportsSpec{}
	p.keys(kvs, path, "junit", map[string]func(ast.Node, string){
		"junit": func(v ast.Node, kp string) { r.JUnit = p.strList(v, kp) },
	})
	if len(r.JUnit) == 0 || len(r.JUnit) > maxReportGlobs {
		p.errorf(n, path+".junit", "junit is a list of 1 to %d patterns of report files", maxReportGlobs)
		return nil
	}
	for _, g := range r.JUnit {
		c := pathpkg.Clean(g)
		if !doublestar.ValidatePattern(g) || g == "" || c == "." || !filepath.IsLocal(c) || strings.Contains(g, "${{") {
			p.errorf(n, path+".junit", "pattern %q must be a valid glob, relative and inside the workspace", g)
		}
	}
	return r
}
