package protocol

import (
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// Identity tokens (docs/deployments.md): a job whose pipeline asks for
// them (permissions: {id-token: write}) gets OIDC tokens bound to its
// lease; deploy targets check them with the issuer's JWKS, and may ask
// /v1/leases/introspect whether the lease is still the job's.
const (
	RouteIDToken = "id-token"
	// PathDiscovery, PathJWKS and PathIntrospect are public: no token.
	PathDiscovery  = "/.well-known/openid-configuration"
	PathJWKS       = "/.well-known/jwks"
	PathIntrospect = "/v1/leases/introspect"
	// MaxAudience bounds an audience: visible ASCII, as a URL or a name
	// such as sts.amazonaws.com.
	MaxAudience = 256
	// MaxTokenLen bounds a token a verifier reads.
	MaxTokenLen = 16 << 10
	// MaxLiveIDTokens bounds the tokens of one attempt not yet expired:
	// the runner masks that many in the job's log (each rebuilds its
	// masker), so the server hands out no more, and no live token goes
	// unmasked however long the lease.
	MaxLiveIDTokens = 64
)

// TokenSubject is a token's sub: "project:<project>:ref:<ref>", plus
// ":environment:<env>" when env is set. No part holds a ':' (the store
// refuses a token for a run whose ref does), so a trust policy's
// StringLike cannot be met by a crafted part.
func TokenSubject(project, ref, env string) string {
	sub := "project:" + project + ":ref:" + ref
	if env != "" {
		sub += ":environment:" + env
	}
	return sub
}

// IDTokenRequest asks for a token for one audience.
type IDTokenRequest struct {
	Leased
	Audience string `json:"audience"`
}

// Validate checks the audience.
func (r *IDTokenRequest) Validate() error {
	if r.Audience == "" || len(r.Audience) > MaxAudience {
		return domain.Errorf(domain.EInvalid, "field audience is required: 1 to %d characters, such as sts.amazonaws.com", MaxAudience)
	}
	for _, c := range []byte(r.Audience) {
		if c <= ' ' || c > '~' {
			return domain.Errorf(domain.EInvalid, "field audience holds %q: only visible ASCII characters, no spaces", c)
		}
	}
	return nil
}

// IDTokenResponse is a signed JWT and when it expires (never after the
// lease it is bound to).
type IDTokenResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// IntrospectRequest asks whether a token's lease is current.
type IntrospectRequest struct {
	Token string `json:"token"`
}

// IntrospectResponse: active only while the token is valid (signature,
// issuer, times) and the lease it names is the job's current, unexpired
// lease of a runner not revoked; then it carries the token's claims.
type IntrospectResponse struct {
	Active bool `json:"active"`
	*IntrospectClaims
}

// IntrospectClaims are an active token's claims.
type IntrospectClaims struct {
	Issuer      string `json:"iss"`
	Subject     string `json:"sub"`
	Audience    string `json:"aud"`
	IssuedAt    int64  `json:"iat"`
	NotBefore   int64  `json:"nbf"`
	Expiry      int64  `json:"exp"`
	ID          string `json:"jti"`
	Project     string `json:"project"`
	Ref         string `json:"ref"`
	SHA         string `json:"sha"`
	Event       string `json:"event"`
	Environment string `json:"environment,omitempty"`
	Trusted     bool   `json:"trusted"`
	RunID       string `json:"run_id"`
	JobID       string `json:"job_id"`
	Generation  int    `json:"generation"`
	LeaseID     string `json:"lease_id"`
	RunnerID    string `json:"runner_id"`
}
