package idtoken

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"

	"github.com/go-jose/go-jose/v4"
)

// MaxTokenLen bounds what Verify reads: a ForgeCI token is about 1.5 KiB,
// and a bound keeps hostile input from costing more than a real token.
const MaxTokenLen = protocol.MaxTokenLen

// algorithm is the only JWS algorithm issued or accepted.
const algorithm = jose.RS256

// The JWT payload is protocol.IntrospectClaims: the claims as the API
// answers them. A missing time claim decodes as 0, which Verify refuses
// (ForgeCI issues none from 1970).

// claimNames are the payload's claims, for the discovery document.
var claimNames = []string{
	"iss", "sub", "aud", "iat", "nbf", "exp", "jti",
	"project", "ref", "sha", "event", "environment", "trusted",
	"run_id", "job_id", "generation", "lease_id", "runner_id",
}

func toWire(c Claims) protocol.IntrospectClaims {
	return protocol.IntrospectClaims{Issuer: c.Issuer, Subject: c.Subject, Audience: c.Audience,
		IssuedAt: unix(c.IssuedAt), NotBefore: unix(c.NotBefore), Expiry: unix(c.Expiry), ID: c.ID,
		Project: c.Project, Ref: c.Ref, SHA: c.SHA, Event: c.Event, Environment: c.Environment, Trusted: c.Trusted,
		RunID: c.RunID, JobID: c.JobID, Generation: c.Generation, LeaseID: c.LeaseID, RunnerID: c.RunnerID}
}

// unix is t in seconds, 0 for the zero time (a claim not set).
func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func fromWire(w protocol.IntrospectClaims) *Claims {
	return &Claims{Issuer: w.Issuer, Subject: w.Subject, Audience: w.Audience,
		IssuedAt: time.Unix(w.IssuedAt, 0).UTC(), NotBefore: time.Unix(w.NotBefore, 0).UTC(), Expiry: time.Unix(w.Expiry, 0).UTC(),
		ID: w.ID, Project: w.Project, Ref: w.Ref, SHA: w.SHA, Event: w.Event, Environment: w.Environment,
		Trusted: w.Trusted, RunID: w.RunID, JobID: w.JobID, Generation: w.Generation, LeaseID: w.LeaseID, RunnerID: w.RunnerID}
}

// checkClaims refuses claims a relying party could not safely use. Times
// are compared in whole seconds, as they are sent.
func checkClaims(c protocol.IntrospectClaims) error {
	switch {
	case c.Audience == "":
		return errors.New(errorPrefix + "claims have no audience")
	case c.Subject == "":
		return errors.New(errorPrefix + "claims have no subject")
	case c.ID == "":
		return errors.New(errorPrefix + "claims have no ID (jti)")
	case c.IssuedAt == 0 || c.NotBefore == 0 || c.Expiry == 0:
		return errors.New(errorPrefix + "claims lack iat, nbf or exp")
	case c.Expiry <= c.NotBefore:
		return fmt.Errorf(errorPrefix+"claims expire (%s) before they are valid (%s)",
			time.Unix(c.Expiry, 0).UTC(), time.Unix(c.NotBefore, 0).UTC())
	}
	return nil
}

// Sign sets c.Issuer to URL() and returns the token: a compact JWS with
// header alg RS256, kid and typ JWT, signed by the first configured key.
func (i *Issuer) Sign(ctx context.Context, c Claims) (string, error) {
	return i.SignClaims(ctx, toWire(c))
}

// SignClaims is Sign for the claims in the protocol's form (the API's:
// package api does not import this one, so that only the oidc function
// links the KMS and JOSE code).
func (i *Issuer) SignClaims(ctx context.Context, c protocol.IntrospectClaims) (string, error) {
	c.Issuer = i.url
	if err := checkClaims(c); err != nil {
		return "", err
	}
	k, err := i.key(ctx, i.keyIDs[0])
	if err != nil {
		return "", err
	}
	opaque := &callSigner{ctx: ctx, backend: i.backend, keyID: i.keyIDs[0], key: k}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: algorithm, Key: opaque}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", fmt.Errorf(errorPrefix+"signer: %w", err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf(errorPrefix+"claims: %w", err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf(errorPrefix+"sign: %w", err)
	}
	return obj.CompactSerialize()
}

// callSigner is a jose.OpaqueSigner for one Sign call: SignPayload has no
// context argument, so it carries the caller's.
type callSigner struct {
	ctx     context.Context
	backend backend
	keyID   string
	key     *publicKey
}

func (s *callSigner) Public() *jose.JSONWebKey {
	return &jose.JSONWebKey{Key: s.key.pub, KeyID: s.key.kid, Algorithm: string(algorithm), Use: "sig"}
}

func (s *callSigner) Algs() []jose.SignatureAlgorithm { return []jose.SignatureAlgorithm{algorithm} }

// SignPayload signs the JWS signing input. The signature is checked
// against the published key before use, so a key swapped or misconfigured
// in KMS shows here rather than as tokens nobody can verify.
func (s *callSigner) SignPayload(payload []byte, alg jose.SignatureAlgorithm) ([]byte, error) {
	if alg != algorithm {
		return nil, fmt.Errorf(errorPrefix+"algorithm %s not supported", alg)
	}
	digest := sha256.Sum256(payload)
	sig, err := s.backend.signDigest(s.ctx, s.keyID, digest[:])
	if err != nil {
		return nil, err
	}
	if err := rsa.VerifyPKCS1v15(s.key.pub, crypto.SHA256, digest[:], sig); err != nil {
		return nil, fmt.Errorf(errorPrefix+"signature of key %s does not verify with its public key: %w", s.keyID, err)
	}
	return sig, nil
}

// Verify checks that token was signed by a configured key (chosen by kid)
// with RS256, that iss is URL(), and that now is in [nbf, exp), without
// leeway; now is the caller's clock (the database's, say). It returns the
// claims; the caller checks the audience and the rest.
func (i *Issuer) Verify(ctx context.Context, token string, now time.Time) (*Claims, error) {
	w, err := i.VerifyClaims(ctx, token, now)
	if err != nil {
		return nil, err
	}
	return fromWire(w), nil
}

// VerifyClaims is Verify, answering the claims in the protocol's form.
func (i *Issuer) VerifyClaims(ctx context.Context, token string, now time.Time) (protocol.IntrospectClaims, error) {
	var none protocol.IntrospectClaims
	if len(token) > MaxTokenLen {
		return none, fmt.Errorf(errorPrefix+"token of %d bytes is longer than %d", len(token), MaxTokenLen)
	}
	obj, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{algorithm})
	if err != nil {
		return none, fmt.Errorf(errorPrefix+"malformed token: %w", err)
	}
	if len(obj.Signatures) != 1 {
		return none, errors.New(errorPrefix + "token does not have exactly one signature")
	}
	keys, err := i.allKeys(ctx)
	if err != nil {
		return none, err
	}
	var pub *rsa.PublicKey
	for _, k := range keys {
		if k.kid == obj.Signatures[0].Protected.KeyID {
			pub = k.pub
		}
	}
	if pub == nil {
		return none, errors.New(errorPrefix + "token is signed by an unknown key (kid)")
	}
	payload, err := obj.Verify(pub)
	if err != nil {
		return none, fmt.Errorf(errorPrefix+"bad signature: %w", err)
	}
	var w protocol.IntrospectClaims
	if err := json.Unmarshal(payload, &w); err != nil {
		return none, fmt.Errorf(errorPrefix+"malformed claims: %w", err)
	}
	switch {
	case w.IssuedAt == 0 || w.NotBefore == 0 || w.Expiry == 0:
		return none, errors.New(errorPrefix + "token lacks iat, nbf or exp")
	case w.Issuer != i.url:
		return none, fmt.Errorf(errorPrefix+"token issuer %q is not %q", w.Issuer, i.url)
	case now.Before(time.Unix(w.NotBefore, 0)):
		return none, errors.New(errorPrefix + "token is not valid yet (nbf)")
	case !now.Before(time.Unix(w.Expiry, 0)):
		return none, errors.New(errorPrefix + "token has expired (exp)")
	}
	return w, nil
}

// JWKS returns the JSON Web Key Set of every configured key, public parts
// only. The public keys are fetched on first need and then kept.
func (i *Issuer) JWKS(ctx context.Context) ([]byte, error) {
	keys, err := i.allKeys(ctx)
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	seen := map[string]bool{}
	for _, k := range keys {
		// One key named twice (by ID and by ARN) is published once.
		if seen[k.kid] {
			continue
		}
		seen[k.kid] = true
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.pub, KeyID: k.kid, Algorithm: string(algorithm), Use: "sig"})
	}
	return json.Marshal(set)
}

// discovery is the OpenID Provider metadata (OpenID Connect Discovery 1.0
// section 3): what AWS IAM, GCP and Vault read to trust the issuer.
type discovery struct {
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	ResponseTypes []string `json:"response_types_supported"`
	SubjectTypes  []string `json:"subject_types_supported"`
	SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
	Scopes        []string `json:"scopes_supported"`
	Claims        []string `json:"claims_supported"`
}

// Discovery returns the discovery document, served at
// URL()/.well-known/openid-configuration.
func (i *Issuer) Discovery() []byte {
	b, err := json.Marshal(discovery{
		Issuer:        i.url,
		JWKSURI:       i.JWKSURL(),
		ResponseTypes: []string{"id_token"},
		SubjectTypes:  []string{"public"},
		SigningAlgs:   []string{string(algorithm)},
		Scopes:        []string{"openid"},
		Claims:        claimNames,
	})
	if err != nil {
		panic(err) // strings and slices of strings always marshal
	}
	return b
}
