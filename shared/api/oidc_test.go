package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// tokenClaims are the claims a relying party reads.
type tokenClaims struct {
	Subject     string `json:"sub"`
	Audience    string `json:"aud"`
	Expiry      int64  `json:"exp"`
	NotBefore   int64  `json:"nbf"`
	Project     string `json:"project"`
	Ref         string `json:"ref"`
	SHA         string `json:"sha"`
	Environment string `json:"environment"`
	Trusted     bool   `json:"trusted"`
	RunID       string `json:"run_id"`
	JobID       string `json:"job_id"`
	Generation  int    `json:"generation"`
	LeaseID     string `json:"lease_id"`
	RunnerID    string `json:"runner_id"`
}

// deployJob makes a run of project acme/app on ref with one job asking
// for tokens (in environment env, made without rules, unless empty) and
// returns runner a's claim of it.
func (e *env) deployJob(a runnerCreds, ref, env string) protocol.Claim {
	e.t.Helper()
	spec := domain.JobSpec{IDToken: true}
	if env != "" {
		spec.Environment = &domain.EnvironmentSpec{Name: env}
	}
	if _, err := e.store.CreateRun(context.Background(), store.NewRun{Project: "acme/app", GitRef: ref, GitSHA: strings.Repeat("ab", 20),
		Jobs: []store.NewJob{{Name: "deploy", Spec: spec}}}); err != nil {
		e.t.Fatal(err)
	}
	return e.claim(a)
}

// idToken asks for a token for the claim's lease.
func (e *env) idToken(a runnerCreds, c protocol.Claim, aud string) (string, time.Time) {
	e.t.Helper()
	status, body := e.post("/v1/runner/jobs/"+c.Job.ID+"/id-token", a.Token, leaseBody(c.Lease, map[string]any{"audience": aud}))
	if status != http.StatusOK {
		e.t.Fatalf("id-token: %d %s", status, body)
	}
	var out protocol.IDTokenResponse
	if err := json.Unmarshal(body, &out); err != nil {
		e.t.Fatal(err)
	}
	return out.Token, out.ExpiresAt
}

func (e *env) introspect(token string) (bool, map[string]any) {
	e.t.Helper()
	status, body := e.post("/v1/leases/introspect", "", map[string]any{"token": token})
	if status != http.StatusOK {
		e.t.Fatalf("introspect: %d %s", status, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		e.t.Fatal(err)
	}
	active, _ := m["active"].(bool)
	return active, m
}

// verify checks a token with an independent OIDC client against the
// discovery document and JWKS the server serves.
func (e *env) verify(token, aud string) tokenClaims {
	e.t.Helper()
	ctx := context.Background()
	provider, err := oidc.NewProvider(ctx, e.srv.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	idt, err := provider.Verifier(&oidc.Config{ClientID: aud}).Verify(ctx, token)
	if err != nil {
		e.t.Fatalf("go-oidc refuses the token: %v", err)
	}
	var c tokenClaims
	if err := idt.Claims(&c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestIDTokenBoundToLease: a token verifies with go-oidc against the
// served JWKS and carries the lease and the run's facts; it expires no
// later than the lease; introspection says active while the lease is
// current and turns false when it expires, is superseded by a new
// generation, its runner is revoked, or the job ends.
func TestIDTokenBoundToLease(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("box")
	endings := map[string]func(c protocol.Claim){
		"expired": func(c protocol.Claim) {
			e.exec(`UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, c.Job.ID)
		},
		"superseded": func(c protocol.Claim) {
			e.exec(`UPDATE jobs SET generation = generation + 1, lease_id = gen_random_uuid() WHERE id = $1`, c.Job.ID)
		},
		"revoked":   func(c protocol.Claim) { e.exec(`UPDATE runners SET revoked_at = now() WHERE id = $1`, a.ID) },
		"canceling": func(c protocol.Claim) { e.exec(`UPDATE runs SET cancel_requested = true WHERE id = $1`, c.Lease.RunID) },
		"job ended": func(c protocol.Claim) {
			if status, body := e.post("/v1/runner/jobs/"+c.Job.ID+"/complete", a.Token, leaseBody(c.Lease, map[string]any{"outcome": "passed", "exit_code": 0})); status != 200 {
				t.Fatalf("complete: %d %s", status, body)
			}
		},
	}
	for name, end := range endings {
		t.Run(name, func(t *testing.T) {
			e.t = t
			c := e.deployJob(a, "refs/heads/main", "")
			token, expires := e.idToken(a, c, "sts.amazonaws.com")
			claims := e.verify(token, "sts.amazonaws.com")
			var leaseEnd time.Time
			if err := e.pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM jobs WHERE id = $1`, c.Job.ID).Scan(&leaseEnd); err != nil {
				t.Fatal(err)
			}
			want := tokenClaims{Subject: "project:acme/app:ref:refs/heads/main", Audience: "sts.amazonaws.com", Project: "acme/app",
				Ref: "refs/heads/main", SHA: strings.Repeat("ab", 20), Trusted: true, RunID: c.Lease.RunID, JobID: c.Job.ID,
				Generation: c.Lease.Generation, LeaseID: c.Lease.LeaseID, RunnerID: a.ID, Expiry: claims.Expiry, NotBefore: claims.NotBefore}
			switch {
			case claims != want:
				t.Fatalf("claims\n%+v, want\n%+v", claims, want)
			case time.Unix(claims.Expiry, 0).After(leaseEnd) || !expires.Equal(time.Unix(claims.Expiry, 0)):
				t.Fatalf("exp %d (answer %s) after the lease's expiry %s", claims.Expiry, expires, leaseEnd)
			case leaseEnd.Sub(time.Unix(claims.Expiry, 0)) >= time.Second:
				t.Fatalf("exp %d is not the lease's expiry %s", claims.Expiry, leaseEnd)
			}
			if active, m := e.introspect(token); !active || m["lease_id"] != c.Lease.LeaseID || m["sub"] != want.Subject {
				t.Fatalf("introspect while the lease is current: %v", m)
			}
			end(c)
			if active, m := e.introspect(token); active || len(m) != 1 {
				t.Fatalf("introspect after %s: %v", name, m)
			}
			e.exec(`UPDATE runners SET revoked_at = NULL`)
			e.exec(`UPDATE jobs SET state = 'CANCELED', finished_at = now() WHERE state IN ('RUNNING', 'QUEUED')`)
		})
	}
}

// TestIDTokenRefused: no token for a job whose pipeline did not ask, for
// an untrusted run's job, or for a bad audience; nothing is recorded.
// Introspection of what this server did not sign is inactive.
func TestIDTokenRefused(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("box")
	if _, err := e.store.CreateRun(context.Background(), store.NewRun{Project: "acme/app", GitRef: "refs/heads/main",
		Jobs: []store.NewJob{{Name: "plain"}}}); err != nil {
		t.Fatal(err)
	}
	plain := e.claim(a)
	untrusted, err := e.store.CreateRun(context.Background(), store.NewRun{Project: "acme/app", GitRef: "refs/pull/1/merge",
		Untrusted: true, Actor: "github:1", Jobs: []store.NewJob{{Name: "fork", Spec: domain.JobSpec{IDToken: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	root, err := e.store.AuthenticateUser(context.Background(), e.user("root", store.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Approve(context.Background(), root, untrusted.ID); err != nil {
		t.Fatal(err)
	}
	fork := e.claim(a)
	asking := e.deployJob(a, "refs/heads/main", "")
	before := e.snapshot()
	for _, tc := range []struct {
		name   string
		c      protocol.Claim
		aud    string
		status int
		code   string
	}{
		{"not asked for", plain, "sts.amazonaws.com", 403, "forbidden"},
		{"untrusted run", fork, "sts.amazonaws.com", 403, "forbidden"},
		{"no audience", asking, "", 400, "invalid_request"},
		{"audience with a space", asking, "a b", 400, "invalid_request"},
		{"audience too long", asking, strings.Repeat("a", 257), 400, "invalid_request"},
	} {
		status, body := e.post("/v1/runner/jobs/"+tc.c.Job.ID+"/id-token", a.Token, leaseBody(tc.c.Lease, map[string]any{"audience": tc.aud}))
		if status != tc.status || errCode(body) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
		}
	}
	if after := e.snapshot(); after != before {
		t.Fatalf("refused calls changed the database:\n%s", after)
	}
	// An attempt gets a bounded number of tokens a minute.
	for range store.MaxIDTokensPerMinute {
		e.idToken(a, asking, "aud")
	}
	if status, body := e.post("/v1/runner/jobs/"+asking.Job.ID+"/id-token", a.Token, leaseBody(asking.Lease, map[string]any{"audience": "aud"})); status != 413 {
		t.Errorf("token %d of the minute: %d %s", store.MaxIDTokensPerMinute+1, status, body)
	}
	e.exec(`UPDATE id_tokens SET issued_at = issued_at - interval '2 minutes'`)
	// A job being canceled gets none.
	e.exec(`UPDATE jobs SET cancel_requested = true WHERE id = $1`, asking.Job.ID)
	if status, body := e.post("/v1/runner/jobs/"+asking.Job.ID+"/id-token", a.Token, leaseBody(asking.Lease, map[string]any{"audience": "aud"})); status != 409 || errCode(body) != "conflict" {
		t.Errorf("canceling job: %d %s", status, body)
	}
	e.exec(`UPDATE jobs SET cancel_requested = false WHERE id = $1`, asking.Job.ID)
	token, _ := e.idToken(a, asking, "aud")
	parts := strings.Split(token, ".")
	for name, bad := range map[string]string{"garbage": "not a token", "empty": "",
		"tampered": parts[0] + "." + parts[1] + "x." + parts[2], "unsigned": parts[0] + "." + parts[1] + "."} {
		if active, m := e.introspect(bad); active || len(m) != 1 {
			t.Errorf("%s: %v", name, m)
		}
	}
	if status, body := e.post("/v1/leases/introspect", "", map[string]any{"token": strings.Repeat("a", 40<<10)}); status != 413 {
		t.Errorf("oversize introspect: %d %s", status, body)
	}
}

// TestIDTokenRecordChecksAgain: the record of a signed token checks the
// cancel and the minute's count again, in its own transaction. Grants
// write nothing, so requests in parallel all pass the grant's count, and
// a cancel may come while a token is signed: either way the token must
// not be recorded, so it is never handed out.
func TestIDTokenRecordChecksAgain(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	a := e.registerRunner("box")
	c := e.deployJob(a, "refs/heads/main", "")
	var grants []store.IDTokenGrant
	for range store.MaxIDTokensPerMinute + 1 {
		g, err := e.store.GrantIDToken(ctx, a.ID, c.Job.ID, c.Lease)
		if err != nil {
			t.Fatalf("grant %d: %v", len(grants)+1, err)
		}
		grants = append(grants, g)
	}
	for i, g := range grants {
		err := e.store.RecordIDToken(ctx, a.ID, c.Job.ID, c.Lease, g, "aud")
		if i < store.MaxIDTokensPerMinute && err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		if i == store.MaxIDTokensPerMinute && !domain.Is(err, domain.ETooLarge) {
			t.Fatalf("record %d of the minute, granted before any was recorded: %v", i+1, err)
		}
	}
	e.exec(`UPDATE id_tokens SET issued_at = issued_at - interval '2 minutes'`)
	g, err := e.store.GrantIDToken(ctx, a.ID, c.Job.ID, c.Lease)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE runs SET cancel_requested = true WHERE id = $1`, c.Lease.RunID) // while it is signed
	if err := e.store.RecordIDToken(ctx, a.ID, c.Job.ID, c.Lease, g, "aud"); !domain.Is(err, domain.EConflict) {
		t.Fatalf("record after a cancel: %v", err)
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM id_tokens WHERE job_id = $1`, c.Job.ID).Scan(&n); err != nil || n != store.MaxIDTokensPerMinute {
		t.Fatalf("%d tokens recorded, want %d (%v)", n, store.MaxIDTokensPerMinute, err)
	}
}

// TestLiveIDTokensAreBounded: an attempt holds at most
// protocol.MaxLiveIDTokens tokens not yet expired, however slowly it asks
// for them (the runner masks no more in its log); once one expires it
// gets another.
func TestLiveIDTokensAreBounded(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("box")
	c := e.deployJob(a, "refs/heads/main", "")
	ask := func() (int, []byte) {
		return e.post("/v1/runner/jobs/"+c.Job.ID+"/id-token", a.Token, leaseBody(c.Lease, map[string]any{"audience": "aud"}))
	}
	for i := range protocol.MaxLiveIDTokens {
		if i%store.MaxIDTokensPerMinute == 0 {
			e.exec(`UPDATE id_tokens SET issued_at = issued_at - interval '2 minutes'`) // a slow job: under the minute's bound
		}
		if status, body := ask(); status != 200 {
			t.Fatalf("token %d: %d %s", i+1, status, body)
		}
	}
	e.exec(`UPDATE id_tokens SET issued_at = issued_at - interval '2 minutes'`)
	if status, body := ask(); status != 413 || !strings.Contains(string(body), "not yet expired") {
		t.Fatalf("token %d while %d live: %d %s, want 413", protocol.MaxLiveIDTokens+1, protocol.MaxLiveIDTokens, status, body)
	}
	e.exec(`UPDATE id_tokens SET expires_at = now() - interval '1 second' WHERE jti = (SELECT jti FROM id_tokens LIMIT 1)`)
	if status, body := ask(); status != 200 {
		t.Fatalf("a token after one expired: %d %s", status, body)
	}
}

// TestIssuerDiscovery: the discovery document has every field AWS IAM
// requires of an OIDC provider, served without a token; its jwks_uri
// serves the keys.
func TestIssuerDiscovery(t *testing.T) {
	e := setup(t)
	resp, err := http.Get(e.srv.URL + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Issuer        string   `json:"issuer"`
		JWKSURI       string   `json:"jwks_uri"`
		Responses     []string `json:"response_types_supported"`
		Subjects      []string `json:"subject_types_supported"`
		Algs          []string `json:"id_token_signing_alg_values_supported"`
		ClaimsSupport []string `json:"claims_supported"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if doc.Issuer != e.srv.URL || doc.JWKSURI != e.srv.URL+"/.well-known/jwks" || len(doc.Responses) == 0 || len(doc.Subjects) == 0 ||
		!strings.Contains(strings.Join(doc.Algs, ","), "RS256") || !strings.Contains(strings.Join(doc.ClaimsSupport, ","), "lease_id") {
		t.Fatalf("discovery %+v", doc)
	}
	keys, err := http.Get(doc.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Body.Close()
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.NewDecoder(keys.Body).Decode(&set); err != nil || len(set.Keys) != 1 || set.Keys[0]["kty"] != "RSA" || set.Keys[0]["d"] != nil {
		t.Fatalf("jwks %v %v", set, err)
	}
}

// TestIAMTrustPolicyExample evaluates the trust policy of
// docs/deployments.md's worked example, as IAM does (StringEquals,
// StringLike with * and ?), against real tokens: only a production
// deployment of acme/app matches.
func TestIAMTrustPolicyExample(t *testing.T) {
	e := setup(t)
	a := e.registerRunner("box")
	cond := docPolicyConditions(t)
	cases := []struct {
		ref, env, aud string
		match         bool
	}{
		{"refs/heads/main", "production", "sts.amazonaws.com", true},
		{"refs/tags/v1.2.0", "Production", "sts.amazonaws.com", true},
		{"refs/heads/main", "staging", "sts.amazonaws.com", false},
		{"refs/heads/main", "", "sts.amazonaws.com", false},
		{"refs/heads/main", "production", "other-audience", false},
		{"refs/heads/production", "", "sts.amazonaws.com", false},
	}
	for _, tc := range cases {
		c := e.deployJob(a, tc.ref, tc.env)
		token, _ := e.idToken(a, c, tc.aud)
		claims := e.verify(token, tc.aud)
		got := iamStringEquals(cond.StringEquals["ci.acme.example:aud"], claims.Audience) &&
			iamStringLike(cond.StringLike["ci.acme.example:sub"], claims.Subject)
		if got != tc.match {
			t.Errorf("%s %s %s: sub %q matches %v, want %v", tc.ref, tc.env, tc.aud, claims.Subject, got, tc.match)
		}
		e.exec(`UPDATE jobs SET state = 'CANCELED', finished_at = now() WHERE state = 'RUNNING'`)
	}
	// The other project's production deployments do not match either.
	if iamStringLike(cond.StringLike["ci.acme.example:sub"], "project:acme/app-2:ref:refs/heads/main:environment:production") {
		t.Error("another project's sub matches")
	}
}

type policyCondition struct {
	StringEquals map[string]string
	StringLike   map[string]string
}

// docPolicyConditions reads the worked example's trust policy from the
// document users copy it from.
func docPolicyConditions(t *testing.T) policyCondition {
	raw, err := os.ReadFile("../../docs/deployments.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatal("docs/deployments.md has no JSON policy")
	}
	var policy struct {
		Statement []struct {
			Action    string
			Condition policyCondition
		}
	}
	if err := json.Unmarshal(m[1], &policy); err != nil || len(policy.Statement) != 1 {
		t.Fatalf("policy: %v", err)
	}
	return policy.Statement[0].Condition
}

func iamStringEquals(want, got string) bool { return want != "" && want == got }

// iamStringLike is IAM's StringLike: case-sensitive, * any run of
// characters (/ and : included), ? one character.
func iamStringLike(pattern, s string) bool {
	var re strings.Builder
	re.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			re.WriteString(".*")
		case '?':
			re.WriteString(".")
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	re.WriteString("$")
	return pattern != "" && regexp.MustCompile(re.String()).MatchString(s)
}
