package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Who and what a run is made by (runs.go's createRunTx): the request's
// user and token, the member whose snapshot it runs, and the token that
// snapshot was submitted with.

// token is the API token of the request making the run ("": none).
func (nr NewRun) token() string {
	if nr.By == nil {
		return ""
	}
	return nr.By.TokenID
}

// runMakers checks, in the run's transaction, who the run is made by and
// from: the user creating it (runBy), the member whose snapshot it is,
// and the API tokens that snapshot and the run's inputs were given with.
func runMakers(ctx context.Context, tx pgx.Tx, nr *NewRun, projectID string) error {
	if nr.By != nil {
		if err := runBy(ctx, tx, nr, projectID); err != nil {
			return err
		}
	}
	if nr.SourceBy != "" && (nr.By == nil || nr.SourceBy != "user:"+nr.By.ID) {
		of := Run{Actor: nr.SourceBy, ProjectID: projectID, Project: nr.Project, Trusted: !nr.Untrusted}
		if err := authorStillMay(ctx, tx, of, "its snapshot was submitted"); err != nil {
			return err
		}
	}
	if len(nr.Inputs) > 0 && nr.InputsToken == "" {
		nr.InputsToken = nr.token()
	}
	if err := holdUnrevokedToken(ctx, tx, nr.SourceToken, "its snapshot was submitted", "submit it again"); err != nil {
		return err
	}
	return holdUnrevokedToken(ctx, tx, nr.InputsToken, "its inputs were given", "run it by hand again")
}

// runBy checks that the user creating a run may write to the project and
// sets what the server, not the client, says about the run.
func runBy(ctx context.Context, tx pgx.Tx, nr *NewRun, projectID string) error {
	a, err := authorize(ctx, tx, *nr.By, projectID, RankWrite, "project "+nr.Project)
	if err != nil {
		return err
	}
	if a.Secrets == nr.Untrusted {
		return domain.Errorf(domain.EConflict, "your secrets permission in %s changed while the run was being created; submit again", nr.Project)
	}
	if nr.Trigger == "" {
		nr.Trigger = "cli:" + nr.By.Name
	}
	if nr.Scope == "" {
		nr.Scope = "cli/" + nr.By.Name
	}
	if nr.Actor == "" {
		nr.Actor = "user:" + nr.By.ID
	}
	return nil
}
