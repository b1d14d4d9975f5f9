package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// badges maps the newest ended run's state to a badge's text and colour.
var badges = map[string][2]string{
	domain.RunPassed:   {"passing", "#2e9e44"},
	domain.RunFailed:   {"failing", "#cb2431"},
	domain.RunCanceled: {"canceled", "#9f9f9f"},
	domain.RunAborted:  {"aborted", "#cb2431"},
	"":                 {"no runs", "#9f9f9f"},
}

// badge serves a project's status badge (SVG) for ?branch= (its default
// branch by default): the newest ended run's state. Without login only a
// project that makes its badges public answers (README images are
// fetched without credentials), cacheable for a minute; a bearer token,
// when sent, must be a user's who may read the project.
func (s *Server) badge(w http.ResponseWriter, r *http.Request) {
	// An answer depends on who asks; a refusal is never cached.
	w.Header().Set("Vary", "Authorization")
	w.Header().Set("Cache-Control", "no-store")
	var u *store.User
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		user, err := s.Store.AuthenticateUser(r.Context(), strings.TrimSpace(token))
		if err != nil {
			writeError(w, r, s.Log, err)
			return
		}
		u = &user
	}
	q := r.URL.Query()
	state, err := s.Store.Badge(r.Context(), u, r.PathValue("project"), q.Get("branch"))
	if err != nil {
		writeError(w, r, s.Log, err)
		return
	}
	label := q.Get("label")
	if label == "" || utf8.RuneCountInString(label) > 40 || !utf8.ValidString(label) ||
		strings.ContainsFunc(label, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		label = "build" // what SVG text cannot hold is not shown
	}
	look := badges[state]
	svg := badgeSVG(label, look[0], look[1])
	sum := sha256.Sum256([]byte(svg))
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	h := w.Header()
	h.Set("Content-Type", "image/svg+xml")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("ETag", etag)
	if u == nil {
		h.Set("Cache-Control", "public, max-age=60")
	} else {
		h.Set("Cache-Control", "private, no-store")
	}
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write([]byte(svg))
}

// badgeSVG draws a flat two-part badge: label on grey, text on colour.
func badgeSVG(label, text, colour string) string {
	width := func(s string) int { return 10 + 7*utf8.RuneCountInString(s) }
	lw, tw := width(label), width(text)
	l, t := html.EscapeString(label), html.EscapeString(text)
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="20" role="img" aria-label="%s: %s">`+
		`<title>%s: %s</title><rect width="%d" height="20" fill="#555"/><rect x="%d" width="%d" height="20" fill="%s"/>`+
		`<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">`+
		`<text x="%d" y="14">%s</text><text x="%d" y="14">%s</text></g></svg>`,
		lw+tw, l, t, l, t, lw, lw, tw, colour, lw/2, l, lw+tw/2, t)
}
