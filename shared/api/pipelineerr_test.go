package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/forgeci/forgeci/shared/protocol"
)

// TestInvalidPipelineDetails: a run whose pipeline file is invalid is
// refused with every problem as data, each located in the file, not one
// flattened string.
func TestInvalidPipelineDetails(t *testing.T) {
	f := newTenancy(t)
	src := f.uploadSource("jobs:\n  a:\n    steps: [{run: 'true'}]\n    needs: [nope]\n  b:\n    runs-on: 7\n    steps: []\n")
	status, body := f.call("POST", "/v1/runs", f.global, map[string]any{"project": f.project.ID, "source": src}, false)
	if status != http.StatusBadRequest {
		t.Fatalf("got %d %s, want 400", status, body)
	}
	var e protocol.ErrorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Code != "invalid_request" || len(e.Error.Details) < 2 {
		t.Fatalf("want invalid_request with a detail per problem, got %s", body)
	}
	for _, d := range e.Error.Details {
		if d.File != ".forgeci.yml" || d.Line < 2 || d.Column < 1 || d.Path == "" || d.Message == "" {
			t.Errorf("detail not located: %+v", d)
		}
	}
	// The client decodes the same body back into a domain error that
	// prints each problem on its own line.
	de := protocol.DecodeError(status, []byte(body))
	if len(de.Details) != len(e.Error.Details) {
		t.Fatalf("decoded %d details, the body has %d", len(de.Details), len(e.Error.Details))
	}
	t.Logf("%v", de)
}
