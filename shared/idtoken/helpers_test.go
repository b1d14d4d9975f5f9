package idtoken

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/uuid"

	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
)

// provider serves an issuer's discovery document and JWKS at its URL, as
// the control plane does; which issuer it serves can be swapped, as a
// deploy with a new key list does.
type provider struct {
	srv     *httptest.Server
	current atomic.Pointer[Issuer]
}

func newProvider(t *testing.T) *provider {
	p := &provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		iss := p.current.Load()
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			w.Header().Set("Content-Type", "application/json")
			w.Write(iss.Discovery())
		case "/.well-known/jwks":
			b, err := iss.JWKS(r.Context())
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/jwk-set+json")
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) URL() string       { return p.srv.URL }
func (p *provider) serve(iss *Issuer) { p.current.Store(iss) }

// oidcVerify checks token with go-oidc, an independent verifier, as a
// relying party with client ID aud would: discovery, then the JWKS.
func oidcVerify(t *testing.T, issuerURL, aud, token string) (*oidc.IDToken, error) {
	t.Helper()
	ctx := context.Background()
	p, err := oidc.NewProvider(ctx, issuerURL)
	if err != nil {
		t.Fatalf("go-oidc discovery of %s: %v", issuerURL, err)
	}
	return p.Verifier(&oidc.Config{ClientID: aud}).Verify(ctx, token)
}

// testClaims are the claims of a job's token, valid for ten minutes from
// now (in whole seconds, as sent).
func testClaims(now time.Time) Claims {
	now = now.Truncate(time.Second).UTC()
	return Claims{
		Subject:     protocol.TokenSubject("acme-web", "refs/heads/main", "production"),
		Audience:    "sts.amazonaws.com",
		IssuedAt:    now,
		NotBefore:   now.Add(-5 * time.Second),
		Expiry:      now.Add(10 * time.Minute),
		ID:          uuid.NewString(),
		Project:     "acme-web",
		Ref:         "refs/heads/main",
		SHA:         "8f14e45fceea167a5a36dedd4bea2543a1b2c3d4",
		Event:       "push",
		Environment: "production",
		Trusted:     true,
		RunID:       uuid.NewString(),
		JobID:       uuid.NewString(),
		Generation:  3,
		LeaseID:     uuid.NewString(),
		RunnerID:    "runner-" + uuid.NewString()[:8],
	}
}

// newFake starts a fake KMS and points the SDK at it.
func newFake(t *testing.T) *fakekms.KMS {
	fake, _ := fakekms.New(t)
	fake.SetEnv(t)
	return fake
}

func kmsIssuer(t *testing.T, url string, keyIDs ...string) *Issuer {
	t.Helper()
	iss, err := NewKMS(context.Background(), url, keyIDs)
	if err != nil {
		t.Fatalf("NewKMS: %v", err)
	}
	return iss
}

func fileIssuer(t *testing.T, url string) (*Issuer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "oidc-key.pem")
	iss, err := NewKeyFile(url, path)
	if err != nil {
		t.Fatalf("NewKeyFile: %v", err)
	}
	return iss, path
}

func sign(t *testing.T, iss *Issuer, c Claims) string {
	t.Helper()
	tok, err := iss.Sign(context.Background(), c)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return tok
}

// header decodes a token's JOSE header.
func header(t *testing.T, token string) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// jwks decodes a JWKS into its keys.
func jwks(t *testing.T, iss *Issuer) []map[string]string {
	t.Helper()
	b, err := iss.JWKS(context.Background())
	if err != nil {
		t.Fatalf("JWKS: %v", err)
	}
	var set struct{ Keys []map[string]string }
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatalf("JWKS %s: %v", b, err)
	}
	return set.Keys
}
