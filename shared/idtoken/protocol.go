package idtoken

import (
	"context"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"
)

// The API serves tokens through these two methods, in the protocol's
// claims type, so that package api (linked into every function) does not
// import this package and its KMS and JOSE code: only the oidc function
// and the local stack do.

// SignClaims signs c (its iss set to URL()).
func (i *Issuer) SignClaims(ctx context.Context, c protocol.IntrospectClaims) (string, error) {
	return i.Sign(ctx, Claims{Subject: c.Subject, Audience: c.Audience,
		IssuedAt: time.Unix(c.IssuedAt, 0), NotBefore: time.Unix(c.NotBefore, 0), Expiry: time.Unix(c.Expiry, 0), ID: c.ID,
		Project: c.Project, Ref: c.Ref, SHA: c.SHA, Event: c.Event, Environment: c.Environment, Trusted: c.Trusted,
		RunID: c.RunID, JobID: c.JobID, Generation: c.Generation, LeaseID: c.LeaseID, RunnerID: c.RunnerID})
}

// VerifyClaims is Verify, answering the protocol's claims type.
func (i *Issuer) VerifyClaims(ctx context.Context, token string, now time.Time) (protocol.IntrospectClaims, error) {
	c, err := i.Verify(ctx, token, now)
	if err != nil {
		return protocol.IntrospectClaims{}, err
	}
	return protocol.IntrospectClaims{Issuer: c.Issuer, Subject: c.Subject, Audience: c.Audience,
		IssuedAt: c.IssuedAt.Unix(), NotBefore: c.NotBefore.Unix(), Expiry: c.Expiry.Unix(), ID: c.ID,
		Project: c.Project, Ref: c.Ref, SHA: c.SHA, Event: c.Event, Environment: c.Environment, Trusted: c.Trusted,
		RunID: c.RunID, JobID: c.JobID, Generation: c.Generation, LeaseID: c.LeaseID, RunnerID: c.RunnerID}, nil
}
