package api

import (
	"context"
	"net/http"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
)

// TokenIssuer signs and checks identity tokens (shared/idtoken's Issuer).
// An interface in the protocol's claims type, so that this package, which
// every function links, does not pull in KMS and JOSE: only the oidc
// function sets one.
type TokenIssuer interface {
	SignClaims(ctx context.Context, c protocol.IntrospectClaims) (string, error)
	VerifyClaims(ctx context.Context, token string, now time.Time) (protocol.IntrospectClaims, error)
	Discovery() []byte
	JWKS(ctx context.Context) ([]byte, error)
}

// errNoIssuer answers when this server issues no identity tokens.
var errNoIssuer = domain.Errorf(domain.EUnavailable,
	"identity tokens are not configured on this server (FORGECI_OIDC_ISSUER with FORGECI_OIDC_KMS_KEYS or FORGECI_OIDC_KEY_FILE)")

// idToken issues a token bound to the lease: the store checks the whole
// tuple and the job's right to tokens; the token is signed with no row
// locked (KMS is a network call away), then recorded in a transaction
// that checks the whole tuple again, and handed out only if that
// commits. It expires no later than the lease.
func (s *Server) idToken(ctx context.Context, l held, req *protocol.IDTokenRequest) (*protocol.IDTokenResponse, error) {
	if s.IDTokens == nil {
		return nil, errNoIssuer
	}
	g, err := s.Store.GrantIDToken(ctx, l.Runner.ID, l.JobID, l.Lease)
	if err != nil {
		return nil, err
	}
	token, err := s.IDTokens.SignClaims(ctx, protocol.IntrospectClaims{
		Subject: protocol.TokenSubject(g.Project, g.Ref, g.Environment), Audience: req.Audience,
		IssuedAt: g.IssuedAt.Unix(), NotBefore: g.IssuedAt.Unix(), Expiry: g.Expiry.Unix(), ID: g.JTI,
		Project: g.Project, Ref: g.Ref, SHA: g.SHA, Event: g.Event, Environment: g.Environment, Trusted: g.Trusted,
		RunID: l.Lease.RunID, JobID: l.Lease.JobID, Generation: l.Lease.Generation, LeaseID: l.Lease.LeaseID,
		RunnerID: l.Lease.RunnerID,
	})
	if err != nil {
		return nil, err
	}
	if err := s.Store.RecordIDToken(ctx, l.Runner.ID, l.JobID, l.Lease, g, req.Audience); err != nil {
		return nil, err
	}
	return &protocol.IDTokenResponse{Token: token, ExpiresAt: g.Expiry}, nil
}

// discovery serves the OpenID Provider metadata, public.
func (s *Server) discovery(w http.ResponseWriter, r *http.Request) error {
	if s.IDTokens == nil {
		return errNoIssuer
	}
	writePublicJSON(w, s.IDTokens.Discovery())
	return nil
}

// jwks serves the public keys of every configured signing key.
func (s *Server) jwks(w http.ResponseWriter, r *http.Request) error {
	if s.IDTokens == nil {
		return errNoIssuer
	}
	body, err := s.IDTokens.JWKS(r.Context())
	if err != nil {
		return err
	}
	writePublicJSON(w, body)
	return nil
}

func writePublicJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	// Relying parties cache them; a rotation publishes the new key
	// before it signs (docs/deployments.md).
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// introspect answers whether a token's lease is still the job's current,
// unexpired lease. A token that does not verify is inactive, not an
// error (RFC 7662): the database is asked only about tokens this server
// signed.
func (s *Server) introspect(w http.ResponseWriter, r *http.Request) error {
	if s.IDTokens == nil {
		return errNoIssuer
	}
	var req protocol.IntrospectRequest
	if err := decodeJSON(w, r, 2*protocol.MaxTokenLen, &req); err != nil {
		return err
	}
	out := protocol.IntrospectResponse{}
	c, err := s.IDTokens.VerifyClaims(r.Context(), req.Token, time.Now())
	if err == nil {
		l := domain.Lease{RunID: c.RunID, JobID: c.JobID, RunnerID: c.RunnerID, LeaseID: c.LeaseID, Generation: c.Generation}
		if out.Active, err = s.Store.LeaseActive(r.Context(), l); err != nil {
			return err
		}
	}
	if out.Active {
		out.IntrospectClaims = &c
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
