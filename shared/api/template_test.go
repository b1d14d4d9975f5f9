package api_test

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/forgeci/forgeci/shared/api"
)

// mapping returns the value of key in a YAML mapping node, or nil.
func mapping(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// templateFunctions reads template.yaml: function name -> "METHOD path"
// routes, and the set of functions with a Schedule event.
func templateFunctions(t *testing.T) (routes map[string][]string, scheduled map[string]bool, logicalIDs map[string]string) {
	t.Helper()
	raw, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	routes, scheduled, logicalIDs = map[string][]string{}, map[string]bool{}, map[string]string{}
	res := mapping(doc.Content[0], "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		id, r := res.Content[i].Value, res.Content[i+1]
		if mapping(r, "Type").Value != "AWS::Serverless::Function" {
			continue
		}
		name, ok := strings.CutSuffix(id, "Function")
		if !ok {
			t.Fatalf("function %s: logical IDs must be <Name>Function", id)
		}
		name = strings.ToLower(name)
		logicalIDs[name] = id
		events := mapping(mapping(r, "Properties"), "Events")
		for j := 0; events != nil && j+1 < len(events.Content); j += 2 {
			ev := events.Content[j+1]
			props := mapping(ev, "Properties")
			switch mapping(ev, "Type").Value {
			case "HttpApi":
				routes[name] = append(routes[name], mapping(props, "Method").Value+" "+mapping(props, "Path").Value)
			case "Schedule":
				scheduled[name] = true
			}
		}
	}
	return routes, scheduled, logicalIDs
}

// TestTemplateRoutesMatchHandlers: template.yaml and the handlers serve the
// same set of (function, method, path), every function directory is in the
// template, and the Makefile can build every function.
func TestTemplateRoutesMatchHandlers(t *testing.T) {
	routes, scheduled, ids := templateFunctions(t)
	got := map[string][]string{}
	for name, rs := range routes {
		sort.Strings(rs)
		got[name] = rs
	}
	want := map[string][]string{}
	for _, name := range api.Functions() {
		for _, r := range api.Routes(name) {
			want[name] = append(want[name], r.Method+" "+r.Path)
		}
		sort.Strings(want[name])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("template routes:\n%v\nhandler routes:\n%v", got, want)
	}
	if !scheduled["sweeper"] {
		t.Fatal("the sweeper has no Schedule event in template.yaml")
	}
	dirs, err := os.ReadDir("../../functions")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		id, ok := ids[d.Name()]
		if !ok {
			t.Errorf("functions/%s is not in template.yaml", d.Name())
			continue
		}
		target := regexp.MustCompile(`(?m)^build-` + id + `:`)
		if !target.Match(makefile) {
			t.Errorf("Makefile has no target build-%s for functions/%s", id, d.Name())
		}
	}
	for name := range ids {
		if _, err := os.Stat("../../functions/" + name + "/main.go"); err != nil {
			t.Errorf("template function %s has no functions/%s/main.go", name, name)
		}
	}
}
