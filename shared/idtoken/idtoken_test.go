package idtoken

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"
)

// oidcClaims are the custom claims as a relying party reads them, with
// names spelled out here rather than taken from the package.
type oidcClaims struct {
	JTI         string `json:"jti"`
	NBF         int64  `json:"nbf"`
	Project     string `json:"project"`
	Ref         string `json:"ref"`
	SHA         string `json:"sha"`
	Event       string `json:"event"`
	Environment string `json:"environment"`
	Trusted     bool   `json:"trusted"`
	RunID       string `json:"run_id"`
	JobID       string `json:"job_id"`
	Generation  int    `json:"generation"`
	LeaseID     string `json:"lease_id"`
	RunnerID    string `json:"runner_id"`
}

// TestGoOIDCVerifies: a token signed through (fake) KMS verifies with
// go-oidc against the published discovery document and JWKS, and every
// claim reads back.
func TestGoOIDCVerifies(t *testing.T) {
	fake := newFake(t)
	p := newProvider(t)
	iss := kmsIssuer(t, p.URL(), fake.AddSigningKey())
	p.serve(iss)
	c := testClaims(time.Now())
	tok := sign(t, iss, c)

	h := header(t, tok)
	if h["alg"] != "RS256" || h["typ"] != "JWT" || h["kid"] != jwks(t, iss)[0]["kid"] {
		t.Fatalf("header %v", h)
	}
	idt, err := oidcVerify(t, iss.URL(), c.Audience, tok)
	if err != nil {
		t.Fatalf("go-oidc: %v", err)
	}
	if idt.Issuer != p.URL() || idt.Subject != "project:acme-web:ref:refs/heads/main:environment:production" ||
		!slices.Equal(idt.Audience, []string{c.Audience}) || !idt.Expiry.Equal(c.Expiry) || !idt.IssuedAt.Equal(c.IssuedAt) {
		t.Fatalf("standard claims: iss %s sub %s aud %v exp %s iat %s", idt.Issuer, idt.Subject, idt.Audience, idt.Expiry, idt.IssuedAt)
	}
	var got oidcClaims
	if err := idt.Claims(&got); err != nil {
		t.Fatal(err)
	}
	want := oidcClaims{c.ID, c.NotBefore.Unix(), c.Project, c.Ref, c.SHA, c.Event, c.Environment, c.Trusted,
		c.RunID, c.JobID, c.Generation, c.LeaseID, c.RunnerID}
	if got != want {
		t.Fatalf("claims\n got %+v\nwant %+v", got, want)
	}
	if _, err := oidcVerify(t, iss.URL(), "another-audience", tok); err == nil {
		t.Fatal("go-oidc accepted the token for another audience")
	}

	// Verify reads back what Sign was given, iss filled in.
	back, err := iss.Verify(context.Background(), tok, time.Now())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	c.Issuer = p.URL()
	if *back != c {
		t.Fatalf("Verify\n got %+v\nwant %+v", *back, c)
	}
}

// TestEnvironmentOmitted: without an environment the claim is absent and
// the subject has no environment part.
func TestEnvironmentOmitted(t *testing.T) {
	iss, _ := fileIssuer(t, "https://ci.example.com")
	c := testClaims(time.Now())
	c.Environment = ""
	c.Subject = protocol.TokenSubject(c.Project, c.Ref, "")
	tok := sign(t, iss, c)
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["environment"]; ok || m["sub"] != "project:acme-web:ref:refs/heads/main" || m["trusted"] != true {
		t.Fatalf("payload %s", payload)
	}
	if m["aud"] != "sts.amazonaws.com" || m["generation"] != float64(3) || m["iss"] != "https://ci.example.com" {
		t.Fatalf("payload %s", payload)
	}
}

// TestRotation: keys [k1], then [k2, k1] (k2 signs, k1 still published),
// then [k2]; a token keeps verifying while its key is published.
func TestRotation(t *testing.T) {
	fake := newFake(t)
	k1, k2 := fake.AddSigningKey(), fake.AddSigningKey()
	p := newProvider(t)
	a := kmsIssuer(t, p.URL(), k1)
	p.serve(a)
	c1 := testClaims(time.Now())
	t1 := sign(t, a, c1)
	if _, err := oidcVerify(t, p.URL(), c1.Audience, t1); err != nil {
		t.Fatalf("T1 before rotation: %v", err)
	}

	b := kmsIssuer(t, p.URL(), k2, fake.ARN(k1)) // an ARN names a key as well as an ID
	p.serve(b)
	c2 := testClaims(time.Now())
	t2 := sign(t, b, c2)
	if header(t, t2)["kid"] == header(t, t1)["kid"] {
		t.Fatal("the new key signed with the old kid")
	}
	if got := jwks(t, b); len(got) != 2 || got[0]["kid"] != header(t, t2)["kid"] || got[1]["kid"] != header(t, t1)["kid"] {
		t.Fatalf("JWKS of [k2, k1]: %v", got)
	}
	for name, tok := range map[string]string{"T2": t2, "T1": t1} {
		if _, err := oidcVerify(t, p.URL(), c1.Audience, tok); err != nil {
			t.Fatalf("%s with [k2, k1] published: %v", name, err)
		}
		if _, err := b.Verify(context.Background(), tok, time.Now()); err != nil {
			t.Fatalf("%s: B.Verify: %v", name, err)
		}
	}

	c := kmsIssuer(t, p.URL(), k2)
	p.serve(c)
	if _, err := oidcVerify(t, p.URL(), c1.Audience, t1); err == nil {
		t.Fatal("T1 verified with go-oidc after k1 was retired")
	}
	if _, err := c.Verify(context.Background(), t1, time.Now()); err == nil {
		t.Fatal("T1 verified with C after k1 was retired")
	}
	if _, err := oidcVerify(t, p.URL(), c1.Audience, t2); err != nil {
		t.Fatalf("T2 after k1 was retired: %v", err)
	}
}

// TestDiscovery checks the document has what AWS IAM requires of an OIDC
// provider, and what the other relying parties read.
func TestDiscovery(t *testing.T) {
	fake := newFake(t)
	for _, issuerURL := range []string{"https://ci.example.com/oidc", "http://127.0.0.1:8443"} {
		iss := kmsIssuer(t, issuerURL, fake.AddSigningKey())
		var d map[string]any
		if err := json.Unmarshal(iss.Discovery(), &d); err != nil {
			t.Fatal(err)
		}
		if d["issuer"] != issuerURL || iss.URL() != issuerURL {
			t.Fatalf("issuer %v, want %s", d["issuer"], issuerURL)
		}
		jwksURI, _ := d["jwks_uri"].(string)
		u, err := url.Parse(jwksURI)
		if err != nil || !strings.HasPrefix(jwksURI, issuerURL+"/") || jwksURI != iss.JWKSURL() {
			t.Fatalf("jwks_uri %q is not under %s", jwksURI, issuerURL)
		}
		if u.Scheme != "https" && u.Hostname() != "127.0.0.1" {
			t.Fatalf("jwks_uri %q is neither https nor loopback", jwksURI)
		}
		has := func(field, want string) {
			list, _ := d[field].([]any)
			if !slices.Contains(list, any(want)) {
				t.Fatalf("%s = %v lacks %q", field, d[field], want)
			}
		}
		has("response_types_supported", "id_token")
		has("subject_types_supported", "public")
		has("id_token_signing_alg_values_supported", "RS256")
		has("scopes_supported", "openid")
		for _, claim := range []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "project", "ref", "sha", "event",
			"environment", "trusted", "run_id", "job_id", "generation", "lease_id", "runner_id"} {
			has("claims_supported", claim)
		}
	}
}

// TestJWKSFormat: public parts only, and kid is the RFC 7638 thumbprint,
// computed here from the published members.
func TestJWKSFormat(t *testing.T) {
	fake := newFake(t)
	iss := kmsIssuer(t, "https://ci.example.com", fake.AddSigningKey(), fake.AddSigningKey())
	keys := jwks(t, iss)
	if len(keys) != 2 {
		t.Fatalf("%d keys, want 2", len(keys))
	}
	for _, k := range keys {
		names := make([]string, 0, len(k))
		for name := range k {
			names = append(names, name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"alg", "e", "kid", "kty", "n", "use"}) || k["kty"] != "RSA" || k["alg"] != "RS256" || k["use"] != "sig" {
			t.Fatalf("key %v", k)
		}
		canonical := `{"e":"` + k["e"] + `","kty":"RSA","n":"` + k["n"] + `"}`
		sum := sha256.Sum256([]byte(canonical))
		if want := base64.RawURLEncoding.EncodeToString(sum[:]); k["kid"] != want {
			t.Fatalf("kid %s, want thumbprint %s", k["kid"], want)
		}
	}
	if keys[0]["kid"] == keys[1]["kid"] {
		t.Fatal("two keys with one kid")
	}
}

func TestIssuerURL(t *testing.T) {
	good := map[string]string{
		"https://ci.example.com":       "https://ci.example.com",
		"https://ci.example.com/":      "https://ci.example.com",
		"https://ci.example.com/oidc":  "https://ci.example.com/oidc",
		"https://ci.example.com:8443":  "https://ci.example.com:8443",
		"http://127.0.0.1:8080":        "http://127.0.0.1:8080",
		"http://localhost:3000/forge":  "http://localhost:3000/forge",
		"http://[::1]:9000":            "http://[::1]:9000",
		"http://localhost":             "http://localhost",
		"https://ci.example.com/a/b/c": "https://ci.example.com/a/b/c",
	}
	for raw, want := range good {
		if got, err := checkIssuerURL(raw); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", raw, got, err, want)
		}
	}
	bad := []string{
		"", "/", "ci.example.com", "//ci.example.com", "http://ci.example.com", "http://127.0.0.1.example.com",
		"http://10.0.0.1", "https://ci.example.com?x=1", "https://ci.example.com?", "https://ci.example.com#top",
		"https://user:pw@ci.example.com", "ftp://ci.example.com", "https://", "https:ci.example.com",
		"HTTPS://ci.example.com", "https://ci.example.com/a b", "javascript:alert(1)",
	}
	for _, raw := range bad {
		if got, err := checkIssuerURL(raw); err == nil {
			t.Errorf("%q accepted as %q", raw, got)
		}
	}
	newFake(t)
	if _, err := NewKMS(context.Background(), "http://ci.example.com", []string{"k"}); err == nil {
		t.Error("NewKMS took an http issuer")
	}
	if _, err := NewKeyFile("https://ci.example.com#x", t.TempDir()+"/k.pem"); err == nil {
		t.Error("NewKeyFile took an issuer with a fragment")
	}
	if _, err := NewKMS(context.Background(), "https://ci.example.com", nil); err == nil {
		t.Error("NewKMS took no keys")
	}
	if _, err := NewKMS(context.Background(), "https://ci.example.com", []string{"k1", "k1"}); err == nil {
		t.Error("NewKMS took a repeated key")
	}
}

func TestFromEnv(t *testing.T) {
	fake := newFake(t)
	k1, k2 := fake.AddSigningKey(), fake.AddSigningKey()
	keyFile := t.TempDir() + "/oidc.pem"
	tests := []struct {
		name, issuer, kmsKeys, keyFile string
		wantErr, wantNil               bool
		wantKeys                       []string
	}{
		{name: "off", wantNil: true},
		{name: "issuer only", issuer: "https://ci.example.com", wantErr: true},
		{name: "keys only", kmsKeys: k1, wantErr: true},
		{name: "key file only", keyFile: keyFile, wantErr: true},
		{name: "both key kinds", issuer: "https://ci.example.com", kmsKeys: k1, keyFile: keyFile, wantErr: true},
		{name: "empty key in list", issuer: "https://ci.example.com", kmsKeys: k1 + ",", wantErr: true},
		{name: "bad issuer", issuer: "http://ci.example.com", kmsKeys: k1, wantErr: true},
		{name: "KMS keys", issuer: "https://ci.example.com", kmsKeys: k2 + ", " + k1, wantKeys: []string{k2, k1}},
		{name: "key file", issuer: "https://ci.example.com", keyFile: keyFile, wantKeys: []string{keyFileID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvIssuer, tt.issuer)
			t.Setenv(EnvKMSKeys, tt.kmsKeys)
			t.Setenv(EnvKeyFile, tt.keyFile)
			iss, err := FromEnv(context.Background())
			switch {
			case tt.wantErr:
				if err == nil {
					t.Fatal("no error")
				}
				return
			case err != nil:
				t.Fatal(err)
			case tt.wantNil != (iss == nil):
				t.Fatalf("issuer %v", iss)
			case iss == nil:
				return
			}
			if !slices.Equal(iss.keyIDs, tt.wantKeys) || iss.URL() != tt.issuer {
				t.Fatalf("keys %v at %s, want %v", iss.keyIDs, iss.URL(), tt.wantKeys)
			}
			if _, err := iss.Verify(context.Background(), sign(t, iss, testClaims(time.Now())), time.Now()); err != nil {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
}

func TestSignRefuses(t *testing.T) {
	iss, _ := fileIssuer(t, "https://ci.example.com")
	now := time.Now()
	tests := map[string]func(c *Claims){
		"no audience":          func(c *Claims) { c.Audience = "" },
		"no subject":           func(c *Claims) { c.Subject = "" },
		"no ID":                func(c *Claims) { c.ID = "" },
		"expiry at nbf":        func(c *Claims) { c.Expiry = c.NotBefore },
		"expiry before nbf":    func(c *Claims) { c.Expiry = c.NotBefore.Add(-time.Minute) },
		"expiry in nbf second": func(c *Claims) { c.Expiry = c.NotBefore.Add(999 * time.Millisecond) },
		"no expiry":            func(c *Claims) { c.Expiry = time.Time{} },
		"no iat":               func(c *Claims) { c.IssuedAt = time.Time{} },
	}
	for name, mutate := range tests {
		c := testClaims(now)
		mutate(&c)
		if tok, err := iss.Sign(context.Background(), c); err == nil {
			t.Errorf("%s: signed %s", name, tok)
		}
	}
	c := testClaims(now)
	c.Issuer = "https://evil.example.com" // overwritten, not refused
	tok := sign(t, iss, c)
	if got, err := iss.Verify(context.Background(), tok, now); err != nil || got.Issuer != "https://ci.example.com" {
		t.Fatalf("issuer %v, %v", got, err)
	}
}

func TestSubject(t *testing.T) {
	if got := protocol.TokenSubject("p", "refs/tags/v1", ""); got != "project:p:ref:refs/tags/v1" {
		t.Fatal(got)
	}
	if got := protocol.TokenSubject("p", "refs/heads/main", "prod"); got != "project:p:ref:refs/heads/main:environment:prod" {
		t.Fatal(got)
	}
}
