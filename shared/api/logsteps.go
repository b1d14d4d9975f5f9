package api

import (
	"math"
	"net/http"
	"net/url"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// LogIndexQuery reads a log index request's query: generation (0: the
// current attempt), times=1 for the lines' times, of the stored bytes
// [from, to) (the whole log by default).
func LogIndexQuery(q url.Values, maxLog int64) (gen int, times bool, from, to int64, err error) {
	g, err := generationOf(q)
	if err != nil {
		return 0, false, 0, 0, err
	}
	from, ferr := queryInt(q.Get("from"), 0)
	to, terr := queryInt(q.Get("to"), maxLog)
	if ferr != nil || terr != nil || from < 0 || to < from || to > maxLog {
		return 0, false, 0, 0, domain.Errorf(domain.EInvalid, "from and to are offsets from 0 to %d, from before to", maxLog)
	}
	switch q.Get("times") {
	case "", "0", "false":
	case "1", "true":
		times = true
	default:
		return 0, false, 0, 0, domain.Errorf(domain.EInvalid, "times is 1 or 0")
	}
	return g, times, from, to, nil
}

// generationOf is ?generation=: an attempt, or 0 for the current one.
func generationOf(q url.Values) (int, error) {
	g, err := queryInt(q.Get("generation"), 0)
	if err != nil || g < 0 || g > math.MaxInt32 {
		return 0, domain.Errorf(domain.EInvalid, "generation must be an integer from 0 to %d", math.MaxInt32)
	}
	return int(g), nil
}

// getLogIndex answers an attempt's steps (and, with times=1, its lines'
// times): see store.LogIndexAs.
func (s *Server) getLogIndex(w http.ResponseWriter, r *http.Request, u store.User) error {
	gen, times, from, to, err := LogIndexQuery(r.URL.Query(), s.Store.Limits().MaxLogBytes)
	if err != nil {
		return err
	}
	idx, err := s.Store.LogIndexAs(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"), gen, times, from, to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, idx)
	return nil
}
