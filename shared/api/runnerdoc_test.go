package api_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// runnerBodies are the Go types of each runner route's request and answer.
var runnerBodies = map[string][2]any{
	protocol.PathRegister:                             {protocol.RegisterRequest{}, protocol.RegisterResponse{}},
	protocol.PathClaim:                                {protocol.ClaimRequest{}, protocol.Claim{}},
	protocol.JobPattern(protocol.RouteHeartbeat):      {protocol.HeartbeatRequest{}, protocol.HeartbeatResponse{}},
	protocol.JobPattern(protocol.RouteSource):         {protocol.SourceRequest{}, protocol.SourceResponse{}},
	protocol.JobPattern(protocol.RouteLogs):           {protocol.LogsRequest{}, protocol.LogsResponse{}},
	protocol.JobPattern(protocol.RouteArtifacts):      {protocol.ArtifactRequest{}, protocol.UploadResponse{}},
	protocol.JobPattern(protocol.RouteArtifactCommit): {protocol.ArtifactRequest{}, protocol.ArtifactCommitResponse{}},
	protocol.JobPattern(protocol.RouteArtifactFetch):  {protocol.FetchRequest{}, protocol.BlobResponse{}},
	protocol.JobPattern(protocol.RouteCacheRestore):   {protocol.RestoreRequest{}, protocol.RestoreResponse{}},
	protocol.JobPattern(protocol.RouteCacheSave):      {protocol.CacheRequest{}, protocol.UploadResponse{}},
	protocol.JobPattern(protocol.RouteCacheCommit):    {protocol.CacheRequest{}, protocol.CacheCommitResponse{}},
	protocol.JobPattern(protocol.RouteComplete):       {protocol.CompleteRequest{}, protocol.CompleteResponse{}},
	protocol.JobPattern(protocol.RouteOutputs):        {protocol.OutputsRequest{}, protocol.OutputsResponse{}},
	protocol.JobPattern(protocol.RouteReport):         {protocol.ReportRequest{}, protocol.ReportResponse{}},
	protocol.JobPattern(protocol.RouteIDToken):        {protocol.IDTokenRequest{}, protocol.IDTokenResponse{}},
}

// TestRunnerProtocolDocumented: docs/runner-protocol.md documents exactly
// the runner routes the server serves, and for each the fields of its
// request and answer types in package protocol, no more and no fewer.
func TestRunnerProtocolDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/runner-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := documentedRoutes(t, string(raw))
	served := map[string]bool{}
	for _, fn := range api.Functions() {
		for _, r := range api.Routes(fn) {
			if strings.HasPrefix(r.Path, "/v1/runner/") || r.Path == protocol.PathRegister {
				served[r.Path] = true
				if _, ok := runnerBodies[r.Path]; !ok {
					t.Errorf("runner route %s has no entry in runnerBodies", r.Path)
				}
			}
		}
	}
	for path := range served {
		if _, ok := doc[path]; !ok {
			t.Errorf("runner route %s is not in docs/runner-protocol.md", path)
		}
	}
	for path, d := range doc {
		if !served[path] {
			t.Errorf("docs/runner-protocol.md documents %s, which no handler serves", path)
			continue
		}
		sameFields(t, path+" request", d.request, runnerBodies[path][0])
		sameFields(t, path+" answer", d.answer, runnerBodies[path][1])
		if d.job != "" {
			sameFields(t, path+" job object", d.job, domain.ClaimedJob{})
		}
	}
}

type docRoute struct{ request, answer, job string }

var codeRE = regexp.MustCompile("`(\\{.*?\\})`")

// documentedRoutes reads the "### `path`" sections of the Routes chapter
// and their "Request:", "Answer:" and "Job:" lines.
func documentedRoutes(t *testing.T, doc string) map[string]docRoute {
	routes := map[string]docRoute{}
	var path string
	for _, line := range strings.Split(doc, "\n") {
		if p, ok := strings.CutPrefix(line, "### `"); ok {
			path = strings.TrimSuffix(p, "`")
			continue
		}
		if path == "" {
			continue
		}
		m := codeRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := routes[path]
		switch {
		case strings.HasPrefix(line, "Request:"):
			r.request = m[1]
		case strings.HasPrefix(line, "Answer:"):
			r.answer = m[1]
		case strings.HasPrefix(line, "Job:"):
			r.job = m[1]
		}
		routes[path] = r
	}
	if len(routes) == 0 {
		t.Fatal("no ### `path` sections found in docs/runner-protocol.md")
	}
	return routes
}

// topKeys are the keys of a documented object: quoted names at depth one
// that start the object or follow a comma ("passed"|"failed" are values).
func topKeys(obj string) []string {
	var keys []string
	depth, prev := 0, byte(0)
	for i := 0; i < len(obj); i++ {
		c := obj[i]
		switch {
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == '"':
			end := strings.IndexByte(obj[i+1:], '"')
			if end < 0 {
				return keys
			}
			if depth == 1 && (prev == '{' || prev == ',') {
				keys = append(keys, obj[i+1:i+1+end])
			}
			i += end + 1
		}
		if c != ' ' && c != '"' {
			prev = c
		}
		if c == '"' {
			prev = '"'
		}
	}
	sort.Strings(keys)
	return keys
}

// jsonFields are the JSON names of v's fields, embedded structs flattened.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && tag == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, tag)
	}
	sort.Strings(out)
	return out
}

func sameFields(t *testing.T, what, documented string, v any) {
	t.Helper()
	if documented == "" {
		t.Errorf("%s: not documented", what)
		return
	}
	doc, code := topKeys(documented), jsonFields(reflect.TypeOf(v))
	if !slices.Equal(doc, code) {
		t.Errorf("%s: docs/runner-protocol.md lists %v, %T has %v", what, doc, v, code)
	}
}
