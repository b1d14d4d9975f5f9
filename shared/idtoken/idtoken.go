// Package idtoken issues and verifies ForgeCI's OIDC identity tokens: JWTs
// (RS256) a CI job presents to AWS IAM, GCP, Vault and the like, which trust
// ForgeCI as an OpenID provider through its discovery document and JWKS.
//
// The signing key is an RSA key held in AWS KMS (or, for the local dev
// stack, in a key file). Several keys may be configured for rotation with
// overlap: the first signs, and all are published, so a token signed by a
// retiring key verifies until it expires.
package idtoken

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Claims of a ForgeCI identity token. JSON names in the JWT: iss, sub, aud
// (a single string), iat, nbf, exp (NumericDate seconds), jti, and project,
// ref, sha, event, environment (omitted when ""), trusted, run_id, job_id,
// generation, lease_id, runner_id.
type Claims struct {
	Issuer, Subject, Audience   string
	IssuedAt, NotBefore, Expiry time.Time
	ID                          string // jti

	Project, Ref, SHA, Event, Environment string
	Trusted                               bool
	RunID, JobID                          string
	Generation                            int
	LeaseID, RunnerID                     string
}

// Issuer signs and verifies tokens for one issuer URL.
type Issuer struct {
	url     string
	keyIDs  []string // keyIDs[0] signs; all are published
	backend backend

	mu   sync.Mutex
	keys map[string]*publicKey // key ID -> its public key, once fetched
	// failed remembers a key whose fetch failed, for retryAfter: a
	// retired key disabled in KMS must not cost a KMS call on every
	// public request, nor fail the others.
	failed     map[string]keyFailure
	retryAfter time.Duration
}

type keyFailure struct {
	at  time.Time
	err error
}

// Environment variables read by FromEnv.
const (
	EnvIssuer  = "FORGECI_OIDC_ISSUER"
	EnvKMSKeys = "FORGECI_OIDC_KMS_KEYS"
	EnvKeyFile = "FORGECI_OIDC_KEY_FILE"
)

const (
	jwksPath    = "/.well-known/jwks" // under the issuer URL
	errorPrefix = "idtoken: "
)

// NewKMS signs with KMS keys: keyIDs are key IDs or ARNs of RSA SIGN_VERIFY
// keys (RSA_2048 or larger); keyIDs[0] signs, all are published.
// Credentials and region come from the environment (shared/awsenv), and
// AWS_ENDPOINT_URL_KMS points the client elsewhere. It makes no call to KMS.
func NewKMS(ctx context.Context, issuerURL string, keyIDs []string) (*Issuer, error) {
	u, err := checkIssuerURL(issuerURL)
	if err != nil {
		return nil, err
	}
	if len(keyIDs) == 0 {
		return nil, errors.New(errorPrefix + "no KMS key configured")
	}
	seen := map[string]bool{}
	for _, id := range keyIDs {
		if id == "" || seen[id] {
			return nil, fmt.Errorf(errorPrefix+"KMS key list %q has an empty or repeated key", keyIDs)
		}
		seen[id] = true
	}
	b, err := newKMSBackend()
	if err != nil {
		return nil, err
	}
	return newIssuer(u, keyIDs, b), nil
}

// NewKeyFile signs with a local RSA key, a PKCS #8 PEM file at path, made
// (2048-bit, mode 0600) when absent; its directory must exist. It is for
// the local dev stack, where there is no KMS.
func NewKeyFile(issuerURL, path string) (*Issuer, error) {
	u, err := checkIssuerURL(issuerURL)
	if err != nil {
		return nil, err
	}
	b, err := loadKeyFile(path)
	if err != nil {
		return nil, err
	}
	return newIssuer(u, []string{keyFileID}, b), nil
}

// FromEnv builds the issuer from FORGECI_OIDC_ISSUER and exactly one of
// FORGECI_OIDC_KMS_KEYS (comma-separated, the first signs) and
// FORGECI_OIDC_KEY_FILE. It returns nil, nil when none of them is set:
// identity tokens are then off.
func FromEnv(ctx context.Context) (*Issuer, error) {
	issuer, kmsKeys, keyFile := os.Getenv(EnvIssuer), os.Getenv(EnvKMSKeys), os.Getenv(EnvKeyFile)
	switch {
	case issuer == "" && kmsKeys == "" && keyFile == "":
		return nil, nil
	case kmsKeys != "" && keyFile != "":
		return nil, fmt.Errorf(errorPrefix+"set only one of %s and %s", EnvKMSKeys, EnvKeyFile)
	case issuer == "":
		return nil, fmt.Errorf(errorPrefix+"%s is not set, but a signing key is", EnvIssuer)
	case kmsKeys == "" && keyFile == "":
		return nil, fmt.Errorf(errorPrefix+"%s is set, but neither %s nor %s is", EnvIssuer, EnvKMSKeys, EnvKeyFile)
	case keyFile != "":
		return NewKeyFile(issuer, keyFile)
	}
	var ids []string
	for id := range strings.SplitSeq(kmsKeys, ",") {
		ids = append(ids, strings.TrimSpace(id))
	}
	return NewKMS(ctx, issuer, ids)
}

// keyRetryAfter is how long a failed key fetch is remembered.
const keyRetryAfter = 30 * time.Second

func newIssuer(u string, keyIDs []string, b backend) *Issuer {
	return &Issuer{url: u, keyIDs: keyIDs, backend: b, keys: map[string]*publicKey{},
		failed: map[string]keyFailure{}, retryAfter: keyRetryAfter}
}

// URL is the issuer URL, the iss claim, without a trailing slash.
func (i *Issuer) URL() string { return i.url }

// JWKSURL is where the JSON Web Key Set is published.
func (i *Issuer) JWKSURL() string { return i.url + jwksPath }

// checkIssuerURL accepts an absolute https URL without query, fragment or
// user info, and http only on a loopback host (the dev stack and tests):
// relying parties fetch the keys from it, so it must not be spoofable. It
// returns the URL without a trailing slash, so iss has one spelling.
func checkIssuerURL(raw string) (string, error) {
	trimmed := strings.TrimRight(raw, "/")
	u, err := url.Parse(trimmed)
	if err != nil {
		return "", fmt.Errorf(errorPrefix+"issuer URL %q: %w", raw, err)
	}
	switch {
	case u.Host == "" || u.Opaque != "" || u.User != nil:
		return "", fmt.Errorf(errorPrefix+"issuer URL %q is not an absolute URL with a host", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(trimmed, "?#"):
		return "", fmt.Errorf(errorPrefix+"issuer URL %q has a query or fragment", raw)
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return "", fmt.Errorf(errorPrefix+"issuer URL %q is http; only https is allowed, or http on 127.0.0.1, localhost or [::1]", raw)
	case u.Scheme != "https" && u.Scheme != "http":
		return "", fmt.Errorf(errorPrefix+"issuer URL %q is not https", raw)
	case u.String() != trimmed:
		// Relying parties compare iss byte for byte with their configuration.
		return "", fmt.Errorf(errorPrefix+"issuer URL %q is not in canonical form (%q)", raw, u.String())
	}
	return trimmed, nil
}

func isLoopback(host string) bool {
	return host == "127.0.0.1" || host == "localhost" || host == "::1"
}
