package store

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Notification hooks: where a project's run ends are announced (an
// HMAC-signed JSON webhook, or a Slack-compatible body). Project admins
// manage them; the outbox (notifyoutbox.go) delivers.

// NotifyEvents are the events a hook may ask for.
var NotifyEvents = []string{"run_ended", "branch_failed", "branch_recovered"}

// maxHooks bounds a project's hooks.
const maxHooks = 10

// Hook is a notification hook as its project's admins see it (its secret
// is shown once, when it is made).
type Hook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Format    string    `json:"format"`
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
}

const insertHookSQL = `
INSERT INTO notify_hooks (id, project_id, url, format, events, secret)
SELECT $1, $2, $3, $4, $5, $6 WHERE (SELECT count(*) FROM notify_hooks WHERE project_id = $2) < $7
RETURNING created_at`

const listHooksSQL = `SELECT id, url, format, events, created_at FROM notify_hooks WHERE project_id = $1 ORDER BY created_at, id`

const deleteHookSQL = `DELETE FROM notify_hooks WHERE project_id = $1 AND id = $2`

// checkHook refuses a hook that could never be delivered.
func checkHook(rawURL, format string, events []string) error {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(rawURL) > 2000 || u.User != nil:
		return domain.Errorf(domain.EInvalid, "field url must be an http(s) URL without credentials, at most 2000 characters")
	case format != "json" && format != "slack":
		return domain.Errorf(domain.EInvalid, "field format is json or slack")
	case len(events) == 0:
		return domain.Errorf(domain.EInvalid, "field events names at least one of %s", strings.Join(NotifyEvents, ", "))
	}
	for _, e := range events {
		if !slices.Contains(NotifyEvents, e) {
			return domain.Errorf(domain.EInvalid, "event %q is not one of %s", e, strings.Join(NotifyEvents, ", "))
		}
	}
	return nil
}

// AddHook makes a notification hook of a project u administers and
// returns it with its signing secret (shown this once).
func (s *Store) AddHook(ctx context.Context, u User, project, rawURL, format string, events []string) (Hook, string, error) {
	if format == "" {
		format = "json"
	}
	if err := checkHook(rawURL, format, events); err != nil {
		return Hook{}, "", err
	}
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return Hook{}, "", err
	}
	h := Hook{ID: uuid.Must(uuid.NewV7()).String(), URL: rawURL, Format: format, Events: slices.Compact(slices.Sorted(slices.Values(events)))}
	secret := newSecret("fwh_")
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, p.ID, RankAdmin, "project "+project); err != nil {
			return err
		}
		// Adds to one project take turns: the count below is then exact.
		if _, err := tx.Exec(ctx, lockProjectSQL, p.ID); err != nil {
			return fmt.Errorf("lock project: %w", err)
		}
		err := tx.QueryRow(ctx, insertHookSQL, h.ID, p.ID, h.URL, h.Format, h.Events, secret, maxHooks).Scan(&h.CreatedAt)
		if err == pgx.ErrNoRows {
			return domain.Errorf(domain.EConflict, "project %s has %d hooks, the most it may", project, maxHooks)
		}
		return err
	})
	if err != nil {
		return Hook{}, "", err
	}
	return h, secret, nil
}

// Hooks lists the hooks of a project u administers.
func (s *Store) Hooks(ctx context.Context, u User, project string) ([]Hook, error) {
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return nil, err
	}
	var hooks []Hook
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, p.ID, RankAdmin, "project "+project); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, listHooksSQL, p.ID)
		if err != nil {
			return fmt.Errorf("hooks: %w", err)
		}
		hooks, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Hook, error) {
			var h Hook
			return h, row.Scan(&h.ID, &h.URL, &h.Format, &h.Events, &h.CreatedAt)
		})
		return err
	})
	return hooks, err
}

// DeleteHook removes a hook (and its deliveries) of a project u
// administers.
func (s *Store) DeleteHook(ctx context.Context, u User, project, hookID string) error {
	p, err := s.GetProject(ctx, u, project)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := authorize(ctx, tx, u, p.ID, RankAdmin, "project "+project); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, deleteHookSQL, p.ID, hookID)
		if err == nil && tag.RowsAffected() == 0 {
			err = domain.Errorf(domain.ENotFound, "hook %s not found", hookID)
		}
		return err
	})
}
