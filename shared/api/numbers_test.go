package api_test

import (
	"strings"
	"testing"
)

// TestNumbersRangeChecked: every number a request carries is checked
// against its range, and out of range is 400 naming the field, never a 500
// from the database (an exit code of 2^40, a log offset near 2^63) and
// never a change.
func TestNumbersRangeChecked(t *testing.T) {
	f := newTenancy(t)
	c := f.claim(f.runner)
	huge, wide := int64(1)<<62, int64(1)<<40
	job := func(route string) string { return "/v1/runner/jobs/" + c.Lease.JobID + "/" + route }
	lease := func(gen int64) map[string]any {
		return map[string]any{"run_id": c.Lease.RunID, "job_id": c.Lease.JobID, "runner_id": c.Lease.RunnerID,
			"lease_id": c.Lease.LeaseID, "generation": gen}
	}
	digest := digestOf([]byte("x"))
	before := f.state()
	for _, tc := range []struct {
		method, path, token string
		body                any
		field               string
	}{
		{"POST", job("heartbeat"), f.runner.Token, map[string]any{"lease": lease(wide)}, "lease.generation"},
		{"POST", job("logs"), f.runner.Token, map[string]any{"lease": c.Lease, "offset": huge, "data": []byte("x")}, "offset"},
		{"POST", job("logs"), f.runner.Token, map[string]any{"lease": c.Lease, "offset": -1, "data": []byte("x")}, "offset"},
		{"POST", job("complete"), f.runner.Token, map[string]any{"lease": c.Lease, "outcome": "failed", "exit_code": wide}, "exit_code"},
		{"POST", job("artifacts"), f.runner.Token, map[string]any{"lease": c.Lease, "name": "a", "digest": digest, "size": huge}, "size"},
		{"POST", job("artifacts/commit"), f.runner.Token, map[string]any{"lease": c.Lease, "name": "a", "digest": digest, "size": huge}, "size"},
		{"POST", job("cache/save"), f.runner.Token, map[string]any{"lease": c.Lease, "key": "k", "digest": digest, "size": huge}, "size"},
		{"POST", job("cache/commit"), f.runner.Token, map[string]any{"lease": c.Lease, "key": "k", "digest": digest, "size": -5}, "size"},
		{"POST", "/v1/runner/claim", f.runner.Token, map[string]any{"wait_seconds": wide}, "wait_seconds"},
		{"POST", "/v1/runner/claim", f.runner.Token, `{"wait_seconds": 1e30}`, "wait_seconds"},
		{"POST", "/v1/uploads", f.global, map[string]any{"project": "acme/app", "digest": digest, "size": huge}, "size"},
		{"POST", "/v1/runs", f.global, map[string]any{"project": "acme/app", "source": map[string]any{"blob_digest": digest,
			"manifest_digest": digest, "size": huge}}, "size"},
		{"POST", "/v1/registration-tokens", f.global, map[string]any{"ttl_seconds": wide}, "ttl_seconds"},
		{"GET", "/v1/runs?limit=" + itoa(huge), f.global, nil, "limit"},
		{"GET", "/v1/runs/" + f.done.ID + "/jobs/" + f.doneJob + "/logs?offset=" + itoa(huge), f.global, nil, "offset"},
		{"GET", "/v1/runs/" + f.done.ID + "/jobs/" + f.doneJob + "/logs?generation=" + itoa(huge), f.global, nil, "generation"},
		{"GET", "/v1/deliveries?limit=" + itoa(huge), f.global, nil, "limit"},
	} {
		var body any = tc.body
		if s, ok := tc.body.(string); ok {
			body = rawJSON(s)
		}
		status, out := f.call(tc.method, tc.path, tc.token, body, false)
		if status != 400 || !strings.Contains(out, tc.field) {
			t.Errorf("%s %s with %s out of range: %d %s", tc.method, tc.path, tc.field, status, out)
		}
	}
	// The dashboard's log feed too.
	if status, out := f.call("GET", "/runs/"+f.done.ID+"/jobs/"+f.doneJob+"/log?offset="+itoa(huge), f.global, nil, true); status != 400 {
		t.Errorf("log feed with a huge offset: %d %s", status, out)
	}
	if after := f.state(); after != before {
		t.Fatalf("refused requests changed something:\n%s", diff(before, after))
	}
}
