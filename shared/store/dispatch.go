package store

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// latestSnapshotSQL is the newest run of project $1 on ref $2 in tier $3
// that has a source snapshot.
const latestSnapshotSQL = `SELECT ` + runColumns + `
FROM runs r JOIN projects p ON p.id = r.project_id
WHERE r.project_id = $1 AND r.git_ref = $2 AND r.trusted = $3 AND r.source_digest IS NOT NULL
  AND ($4 = '' OR r.actor = $4)
ORDER BY r.number DESC LIMIT 1`

// projectRepositorySQL is project $1's GitHub repository, if it has one.
const projectRepositorySQL = `SELECT github_id FROM scm_repositories WHERE project_id = $1 LIMIT 1`

// EventDispatch is the event of a manual run of a GitHub project: a
// delivery the API records (the webhook intake takes only push and
// pull_request) for the GitHub worker, which resolves the ref as the App.
const EventDispatch = "forgeci_dispatch"

// DispatchRequest is an EventDispatch delivery's payload: who asked (the
// worker makes the run as them, checking their permissions then), for
// which ref, with which inputs, in which tier.
type DispatchRequest struct {
	// ID tells two requests with the same fields apart (the delivery's
	// GUID; deliveries are also unique by body).
	ID       string            `json:"id"`
	Ref      string            `json:"ref"`
	Inputs   map[string]string `json:"inputs"`
	UserID   string            `json:"user_id"`
	UserName string            `json:"user_name"`
	// TokenID is the API token of the request: the run's inputs are
	// given with it (NewRun.InputsToken), and checked at the run's making.
	TokenID string `json:"token_id,omitempty"`
	Trusted bool   `json:"trusted"`
}

// ProjectRepository is the GitHub repository of a project (ok false for
// a project fed by forgeci submit).
func (s *Store) ProjectRepository(ctx context.Context, projectID string) (int64, bool, error) {
	var id int64
	err := s.pool.QueryRow(ctx, projectRepositorySQL, projectID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("project repository: %w", err)
	}
	return id, true, nil
}

// RecordDispatch records a manual run of a GitHub project's ref as a
// delivery for the GitHub worker, and returns its GUID. Unlike a
// webhook's, the worker's note is made before the commit, as for every
// user's write: a user can be told to try again, GitHub does not.
func (s *Store) RecordDispatch(ctx context.Context, repositoryID int64, req DispatchRequest) (string, error) {
	guid := "dispatch-" + uuid.Must(uuid.NewV7()).String()
	req.ID = guid
	payload, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(payload)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var stored int
		var pending bool
		return tx.QueryRow(ctx, recordDeliverySQL, guid, EventDispatch, repositoryID, payload, sum[:]).Scan(&stored, &pending)
	})
	if err != nil {
		return "", fmt.Errorf("record the run request: %w", err)
	}
	return guid, nil
}

// LatestSnapshot is the newest run of ref in the project that has a
// source snapshot in the given tier: what a manual run of a project fed
// by forgeci submit runs again (and, for a GitHub project, whose pipeline
// the form reads the inputs of).
//
// In the untrusted tier it is only a snapshot of actor's own: another
// member's untrusted run may wait for approval, and running it again as
// actor would pass that gate.
func (s *Store) LatestSnapshot(ctx context.Context, projectID, ref string, trusted bool, actor string) (Run, error) {
	if trusted {
		actor = ""
	}
	run, err := scanRun(s.pool.QueryRow(ctx, latestSnapshotSQL, projectID, ref, trusted, actor))
	if errors.Is(err, pgx.ErrNoRows) {
		tier := map[bool]string{true: "trusted", false: "untrusted"}[trusted]
		return Run{}, domain.Errorf(domain.ENotFound, "no snapshot of %s was submitted to this project in your tier (%s%s): submit one from that branch first (forgeci submit)",
			ref, tier, map[bool]string{true: "", false: ", your own"}[trusted])
	}
	return run, err
}
