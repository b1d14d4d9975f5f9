package api_test

import (
	"os"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/forgeci/forgeci/shared/api"
)

// TestOpenAPIDocumentsUserAPI: docs/openapi.yaml documents exactly the
// routes of the user API function, each with a role and an error response.
func TestOpenAPIDocumentsUserAPI(t *testing.T) {
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                       `yaml:"openapi"`
		Paths   map[string]map[string]map[string]interface{} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			key := strings.ToUpper(method) + " " + path
			documented[key] = true
			if op["x-forgeci-role"] == nil || op["operationId"] == nil {
				t.Errorf("%s has no operationId or x-forgeci-role", key)
			}
			if responses, _ := op["responses"].(map[string]interface{}); responses["default"] == nil {
				t.Errorf("%s documents no error response", key)
			}
		}
	}
	var missing []string
	for _, r := range api.Routes("api") {
		key := r.Method + " " + r.Path
		if !documented[key] {
			missing = append(missing, key)
		}
		delete(documented, key)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("routes not in docs/openapi.yaml: %v", missing)
	}
	for extra := range documented {
		t.Errorf("docs/openapi.yaml documents %s, which no handler serves", extra)
	}
}
