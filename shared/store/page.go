package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
)

// Every list is read a page at a time: at most Limit items after Cursor, in
// the list's fixed order, so no list costs more as a year of use piles up.
// A cursor is opaque to clients: the sort key of the last item served.

// Page sizes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
)

// Page asks for one page of a list.
type Page struct {
	Limit  int    // 1 to MaxPageSize; 0 means DefaultPageSize
	Cursor string // from the previous page's Next; "" for the first
}

// parse is the page's limit and its cursor decoded into n sort-key parts.
func (p Page) parse(n int) (int, []string, error) {
	limit, err := p.limit()
	if err != nil {
		return 0, nil, err
	}
	after, err := p.keys(n)
	return limit, after, err
}

// parseTimed is parse for a list whose query casts the cursor's parts at
// the indexes times to timestamps (trim's callers write them with
// time.RFC3339Nano): a part that is not one was not given out here, and
// must not reach the cast.
func (p Page) parseTimed(n int, times ...int) (int, []string, error) {
	limit, after, err := p.parse(n)
	if err != nil || p.Cursor == "" {
		return limit, after, err
	}
	for _, i := range times {
		t, err := time.Parse(time.RFC3339Nano, after[i])
		// Go takes years from 0 and offsets to ±23:59; PostgreSQL's
		// timestamptz neither (22008, 22009). In UTC, from year 1, it
		// takes every time Go writes.
		if t = t.UTC(); err != nil || t.Year() < 1 {
			return 0, nil, errForeignCursor
		}
		after[i] = t.Format(time.RFC3339Nano)
	}
	return limit, after, nil
}

// errForeignCursor refuses a cursor this server did not write.
var errForeignCursor = domain.Errorf(domain.EInvalid, "cursor is not one this server gave out")

func (p Page) limit() (int, error) {
	switch {
	case p.Limit == 0:
		return DefaultPageSize, nil
	case p.Limit < 1 || p.Limit > MaxPageSize:
		return 0, domain.Errorf(domain.EInvalid, "limit must be from 1 to %d", MaxPageSize)
	}
	return p.Limit, nil
}

// keys decodes the cursor into n sort-key parts; the first page has none.
func (p Page) keys(n int) ([]string, error) {
	if p.Cursor == "" {
		return make([]string, n), nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(p.Cursor)
	var parts []string
	if err == nil && len(raw) <= 2048 {
		err = json.Unmarshal(raw, &parts)
	}
	if err != nil || len(parts) != n {
		return nil, errForeignCursor
	}
	// The parts are sort keys the queries compare: the server's keys are
	// text PostgreSQL holds (JSON's \u0000 decodes to a NUL byte).
	for _, part := range parts {
		if CheckText("cursor", part) != nil {
			return nil, errForeignCursor
		}
	}
	return parts, nil
}

func cursorOf(parts ...string) string {
	raw, _ := json.Marshal(parts)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// adminPage reads a page of one of a project's lists that is ordered by a
// single name: query takes the project, the name to start after and how
// many rows. u must be an admin of the project.
func adminPage[T any](ctx context.Context, s *Store, u User, projectID string, pg Page, what, query string,
	scan func(pgx.CollectableRow) (T, error), name func(T) string) ([]T, string, error) {
	may := func(ctx context.Context, tx pgx.Tx) error {
		_, err := authorize(ctx, tx, u, projectID, RankAdmin, "project "+projectID)
		return err
	}
	return checkedPage(ctx, s, may, pg, what, query, []any{projectID}, scan, name)
}

// checkedPage reads a page of a list ordered by a single key, after may
// passes in the same transaction: query takes args, then the key to
// start after and how many rows.
func checkedPage[T any](ctx context.Context, s *Store, may check, pg Page, what, query string, args []any,
	scan func(pgx.CollectableRow) (T, error), key func(T) string) ([]T, string, error) {
	limit, after, err := pg.parse(1)
	if err != nil {
		return nil, "", err
	}
	out, err := inTxValue(ctx, s, func(tx pgx.Tx) ([]T, error) {
		if err := may.run(ctx, tx); err != nil {
			return nil, err
		}
		rows, err := tx.Query(ctx, query, append(args, after[0], limit+1)...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return pgx.CollectRows(rows, scan)
	})
	if err != nil {
		return nil, "", err
	}
	out, next := trim(out, limit, func(v T) []string { return []string{key(v)} })
	return out, next, nil
}

// trim keeps the first limit items of a query that asked for limit+1 and
// returns the cursor of the next page ("" when there is none).
func trim[T any](items []T, limit int, key func(T) []string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, cursorOf(key(items[limit-1])...)
}
