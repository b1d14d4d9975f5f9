package lambdaapp_test

import (
	"encoding/json"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
)

// smokeIssuer is the issuer the oidc bootstrap is configured with (its
// documents name it; nothing is served there).
const smokeIssuer = "http://127.0.0.1:9"

// oidcEnv is the oidc function's environment: identity tokens signed by
// an RSA key of a fake KMS, reached through the SDK's endpoint override.
func oidcEnv(t *testing.T) []string {
	kms, _ := fakekms.New(t)
	key := kms.AddSigningKey()
	return []string{"FORGECI_OIDC_ISSUER=" + smokeIssuer, "FORGECI_OIDC_KMS_KEYS=" + kms.ARN(key),
		"AWS_ENDPOINT_URL_KMS=" + kms.URL()}
}

// smokeIDToken: through the real oidc bootstrap, a lease holder gets a
// token signed in (fake) KMS that verifies against the JWKS the function
// serves, introspects as active, and a stale tuple gets none.
func smokeIDToken(t *testing.T, f *fleet, runnerToken, jobPath string, current, stale lease) {
	t.Helper()
	var tok struct {
		Token string `json:"token"`
	}
	f.expect("oidc", "POST /v1/runner/jobs/{job_id}/id-token", jobPath+"/id-token", runnerToken,
		map[string]any{"lease": current, "audience": "sts.amazonaws.com"}, 200).json(t, &tok)
	if r := f.expect("oidc", "POST /v1/runner/jobs/{job_id}/id-token", jobPath+"/id-token", runnerToken,
		map[string]any{"lease": stale, "audience": "sts.amazonaws.com"}, 409); r.errorCode() != "lease_mismatch" {
		t.Fatalf("stale tuple: %s", r.Body)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	f.expect("oidc", "GET /.well-known/openid-configuration", "/.well-known/openid-configuration", "", nil, 200).json(t, &doc)
	if doc.Issuer != smokeIssuer || doc.JWKSURI != smokeIssuer+"/.well-known/jwks" {
		t.Fatalf("discovery %+v", doc)
	}
	var set jose.JSONWebKeySet
	f.expect("oidc", "GET /.well-known/jwks", "/.well-known/jwks", "", nil, 200).json(t, &set)
	jws, err := jose.ParseSignedCompact(tok.Token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil || len(set.Keys) != 1 {
		t.Fatalf("token %v, keys %d", err, len(set.Keys))
	}
	payload, err := jws.Verify(set.Keys[0])
	if err != nil {
		t.Fatalf("the token does not verify against the served JWKS: %v", err)
	}
	var claims struct {
		LeaseID string `json:"lease_id"`
		Iss     string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.LeaseID != current.LeaseID || claims.Iss != smokeIssuer {
		t.Fatalf("claims %s", payload)
	}
	var in struct {
		Active bool `json:"active"`
	}
	f.expect("oidc", "POST /v1/leases/introspect", "/v1/leases/introspect", "", map[string]any{"token": tok.Token}, 200).json(t, &in)
	if !in.Active {
		t.Fatal("introspection of a current lease's token: inactive")
	}
}
