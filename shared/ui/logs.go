package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/store"
)

// scriptFeed reports whether path is one the dashboard's script reads
// (a visitor without a session gets 401 there, not the login page).
func scriptFeed(path string) bool {
	return strings.HasSuffix(path, "/log") || strings.HasSuffix(path, "/steps")
}

// JobSteps is the log index of a job's attempt for the dashboard's
// script: its steps (sections of the stored log) and, with times=1, its
// lines' times (api.LogIndexQuery).
func JobSteps(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	gen, times, from, to, err := api.LogIndexQuery(r.URL.Query(), u.Store.Limits().MaxLogBytes)
	if err != nil {
		return err
	}
	idx, err := u.Store.LogIndexAs(r.Context(), user, r.PathValue("run_id"), r.PathValue("job_id"), gen, times, from, to)
	if err != nil {
		return err
	}
	secureHeaders(w)
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(idx)
}

// rawPart is the most one raw log response carries (a Lambda response
// is at most 6 MB, and text of control characters grows six times in its
// JSON); a Link header names the next part.
const rawPart = 1 << 20

// JobRaw is a job attempt's log as plain text, masked, from ?offset=:
// never a page (text/plain, sandboxed, nosniff).
func JobRaw(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	q := r.URL.Query()
	offset, err := strconv.ParseInt(q.Get("offset"), 10, 64)
	if err != nil || offset < 0 {
		offset = 0
	}
	gen, _ := strconv.Atoi(q.Get("generation"))
	var data []byte
	next := offset
	for len(data) < rawPart {
		lw, err := u.Store.ReadLogAs(r.Context(), user, r.PathValue("run_id"), r.PathValue("job_id"), gen, next, min(1<<20, rawPart-int64(len(data))))
		if err != nil {
			return err
		}
		data = append(data, lw.Data...)
		if lw.NextOffset == next {
			break
		}
		next, gen = lw.NextOffset, lw.Generation
	}
	secureHeaders(w)
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'; frame-ancestors 'none'")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(data) >= rawPart {
		w.Header().Set("Link", fmt.Sprintf(`<%s?generation=%d&offset=%d>; rel="next"`, r.URL.EscapedPath(), gen, next))
	}
	_, _ = w.Write(data)
	return nil
}
