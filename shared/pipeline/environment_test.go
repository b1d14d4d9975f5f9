package pipeline_test

import (
	"slices"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestEnvironmentAndIDToken: environment: as a name or {name, url}, with
// the matrix filled in and the rest left for the control plane; and
// permissions' id-token: write, the file's unless a job says its own.
func TestEnvironmentAndIDToken(t *testing.T) {
	p, err := pipeline.Parse("f.yml", []byte(`
permissions: {id-token: write}
jobs:
  build:
    permissions: {contents: read}
    steps: [{run: make}]
  deploy:
    needs: [build]
    environment: Production
    steps: [{run: ./deploy}]
  stage:
    strategy: {matrix: {region: [eu, us]}}
    environment:
      name: staging-${{ matrix.region }}
      url: https://${{ matrix.region }}.example.com/${{ forgeci.sha }}
    steps: [{run: ./deploy}]
  pick:
    environment: ${{ inputs.target }}
    permissions: write-all
    steps: [{run: ./deploy}]
`))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]domain.JobSpec{}
	for _, j := range p.Jobs {
		byName[j.Name] = j.Spec
	}
	checks := []struct {
		job           string
		env, url      string
		idToken, feat bool
	}{
		{"build", "", "", false, false},
		{"deploy", "Production", "", true, true},
		{"stage (eu)", "staging-eu", "https://eu.example.com/${{ forgeci.sha }}", true, true},
		{"stage (us)", "staging-us", "https://us.example.com/${{ forgeci.sha }}", true, true},
		{"pick", "${{ inputs.target }}", "", true, true},
	}
	for _, c := range checks {
		s, ok := byName[c.job]
		if !ok {
			t.Fatalf("no job %q in %v", c.job, p.Jobs)
		}
		var env, url string
		if s.Environment != nil {
			env, url = s.Environment.Name, s.Environment.URL
		}
		if env != c.env || url != c.url || s.IDToken != c.idToken || slices.Contains(s.Features(), domain.FeatureIDToken) != c.feat {
			t.Errorf("%s: environment %q url %q id_token %v features %v", c.job, env, url, s.IDToken, s.Features())
		}
	}
}

func TestEnvironmentRefused(t *testing.T) {
	refuses(t, "jobs:\n  a:\n    %s\n    steps: [{run: x}]\n", map[string]string{
		"environment: prod:eu":                        `environment name "prod:eu" must be 1 to 64`,
		"environment: {url: https://x}":               "name is required",
		"environment: {name: p, region: eu}":          `unknown key "region" (expected name or url)`,
		"environment: ${{ steps.x.outputs.y }}":       "steps",
		"environment: ${{ secrets.TARGET }}":          "secrets",
		"environment: {name: p, url: '${{ env.X }}'}": "env",
		"environment: [a, b]":                         "",
	})
	refuses(t, "jobs:\n  a:\n    strategy: {matrix: {r: ['a b']}}\n    %s\n    steps: [{run: x}]\n", map[string]string{
		"environment: x-${{ matrix.r }}": `is "x-a b" here: an environment name is 1 to 64`,
	})
}

// TestParseTimeNUL: an expression the parser evaluates to text with a NUL
// is refused where it stands, not stored (the database holds no NUL).
func TestParseTimeNUL(t *testing.T) {
	refuses(t, "jobs:\n  a:\n    %s\n    steps: [{run: x}]\n", map[string]string{
		`env: {X: "${{ fromJSON('\"a\\u0000b\"') }}"}`:                  "evaluates to text with a NUL byte",
		`environment: {name: p, url: "${{ fromJSON('\"\\u0000\"') }}"}`: "evaluates to text with a NUL byte",
	})
}
