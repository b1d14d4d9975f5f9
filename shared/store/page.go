package store

import (
	"encoding/base64"
	"encoding/json"

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
		return nil, domain.Errorf(domain.EInvalid, "cursor is not one this server gave out")
	}
	return parts, nil
}

func cursorOf(parts ...string) string {
	raw, _ := json.Marshal(parts)
	return base64.RawURLEncoding.EncodeToString(raw)
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
