package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// The user API beyond submitting: lists, job detail, retry, and what admins
// manage (runners, registration tokens, users, deliveries). docs/openapi.yaml
// documents every route; a test holds the two together.

// pageOf reads ?limit= and ?cursor= (for runs also ?before=, the older
// name of the cursor).
func pageOf(r *http.Request) (store.Page, error) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), store.DefaultPageSize)
	if err != nil || limit < 1 || limit > store.MaxPageSize {
		return store.Page{}, domain.Errorf(domain.EInvalid, "limit must be an integer from 1 to %d", store.MaxPageSize)
	}
	return store.Page{Limit: int(limit), Cursor: firstOf(q.Get("cursor"), q.Get("before"))}, nil
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// writePage writes one page of a list: {"<name>": [...], "next_cursor"}.
// answerTo decodes a body of type Req (at most maxBody bytes) and answers
// with status what do returns for it.
func answerTo[Req any](w http.ResponseWriter, r *http.Request, status int, do func(ctx context.Context, req Req) (any, error)) error {
	var req Req
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	answer, err := do(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, status, answer)
	return nil
}

// writeList answers one page of a list (?limit=, ?cursor=) under name.
func writeList[T any](w http.ResponseWriter, r *http.Request, name string, list func(store.Page) ([]T, string, error)) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	items, next, err := list(pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{name: nonNilSlice(items), "next_cursor": next})
	return nil
}

// writeRun answers with a run and its jobs, as the caller may see them.
func (s *Server) writeRun(w http.ResponseWriter, r *http.Request, u store.User, runID string, status int) error {
	view, err := s.runView(r.Context(), u, runID)
	if err != nil {
		return err
	}
	writeJSON(w, status, view)
	return nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, u store.User) error {
	return writeList(w, r, "runs", func(pg store.Page) ([]store.Run, string, error) {
		q := r.URL.Query()
		return s.Store.ListRuns(r.Context(), u, store.RunFilter{Project: q.Get("project"), Branch: q.Get("branch"),
			State: q.Get("state"), Trigger: q.Get("trigger"), Page: pg})
	})
}

// queue answers the queued jobs the caller may read, oldest first.
func (s *Server) queue(w http.ResponseWriter, r *http.Request, u store.User) error {
	jobs, err := s.Store.Queue(r.Context(), u)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
	return nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, u store.User) error {
	j, err := s.Store.GetJob(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// retry makes a new run of a finished run, or of one of its jobs.
func (s *Server) retry(w http.ResponseWriter, r *http.Request, u store.User) error {
	run, err := s.Store.Retry(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"))
	if err != nil {
		return err
	}
	return s.writeRun(w, r, u, run.ID, http.StatusCreated)
}

// approve and reject decide on a run from a first-time contributor.
func (s *Server) approve(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.decide(w, r, u, s.Store.Approve)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.decide(w, r, u, s.Store.Reject)
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, u store.User,
	do func(ctx context.Context, u store.User, runID string) (store.Run, error)) error {
	run, err := do(r.Context(), u, r.PathValue("run_id"))
	if err != nil {
		return err
	}
	return s.writeRun(w, r, u, run.ID, http.StatusOK)
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request, _ store.User) error {
	return writeList(w, r, "runners", func(pg store.Page) ([]store.RunnerInfo, string, error) {
		return s.Store.ListRunners(r.Context(), pg)
	})
}

func (s *Server) revokeRunner(w http.ResponseWriter, r *http.Request, u store.User) error {
	if err := s.Store.RevokeRunnerAs(r.Context(), u, r.PathValue("runner_id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"revoked": r.PathValue("runner_id")})
	return nil
}

type registrationTokenRequest struct {
	TTLSeconds  int    `json:"ttl_seconds"`
	Description string `json:"description"`
	// The runner's scope: projects (names or IDs; none: every project) and
	// whether it takes untrusted work, or untrusted work only.
	Projects      []string `json:"projects"`
	Untrusted     bool     `json:"untrusted"`
	UntrustedOnly bool     `json:"untrusted_only"`
}

func (s *Server) createRegistrationToken(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req registrationTokenRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if req.TTLSeconds == 0 {
		req.TTLSeconds = 3600
	}
	if req.TTLSeconds < 60 || req.TTLSeconds > 7*24*3600 {
		return domain.Errorf(domain.EInvalid, "ttl_seconds must be from 60 to 604800")
	}
	token, expires, err := s.Store.CreateRegistrationTokenAs(r.Context(), u, time.Duration(req.TTLSeconds)*time.Second, req.Description,
		store.Scope{Projects: req.Projects, Untrusted: req.Untrusted, UntrustedOnly: req.UntrustedOnly})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"registration_token": token, "expires_at": expires})
	return nil
}

func (s *Server) listRegistrationTokens(w http.ResponseWriter, r *http.Request, u store.User) error {
	return writeList(w, r, "registration_tokens", func(pg store.Page) ([]store.RegistrationInfo, string, error) {
		return s.Store.ListRegistrationTokensAs(r.Context(), u, pg)
	})
}

func (s *Server) revokeRegistrationToken(w http.ResponseWriter, r *http.Request, u store.User) error {
	info, err := s.Store.RevokeRegistrationTokenAs(r.Context(), u, r.PathValue("token_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request, _ store.User) error {
	return writeList(w, r, "users", func(pg store.Page) ([]store.UserInfo, string, error) {
		return s.Store.ListUsers(r.Context(), pg)
	})
}

type createUserRequest struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request, by store.User) error {
	return answerTo(w, r, http.StatusCreated, func(ctx context.Context, req createUserRequest) (any, error) {
		u, token, err := s.Store.CreateUserAs(ctx, by, req.Name, req.Role)
		return map[string]any{"user": u, "token": token}, err
	})
}

// tokenOwner is the user a token route names: "me" is the caller. Only
// global admins may name another (the store checks again as it acts).
func tokenOwner(r *http.Request, u store.User) (string, error) {
	id := r.PathValue("user_id")
	if id == "me" {
		id = u.ID
	}
	if id != u.ID && !u.IsAdmin() {
		return "", domain.Errorf(domain.EForbidden, "only admins manage other users' tokens")
	}
	return id, nil
}

// createUserToken: admins for anyone, everyone for themselves.
func (s *Server) createUserToken(w http.ResponseWriter, r *http.Request, u store.User) error {
	id, err := tokenOwner(r, u)
	if err != nil {
		return err
	}
	var req store.NewToken
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	t, err := s.Store.CreateUserTokenAs(r.Context(), u, id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (s *Server) listUserTokens(w http.ResponseWriter, r *http.Request, u store.User) error {
	id, err := tokenOwner(r, u)
	if err != nil {
		return err
	}
	return writeList(w, r, "tokens", func(pg store.Page) ([]store.TokenInfo, string, error) {
		return s.Store.ListUserTokensAs(r.Context(), u, id, pg)
	})
}

func (s *Server) revokeUserToken(w http.ResponseWriter, r *http.Request, u store.User) error {
	id, err := tokenOwner(r, u)
	if err != nil {
		return err
	}
	t, err := s.Store.RevokeUserTokenAs(r.Context(), u, id, r.PathValue("token_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *Server) disableUser(w http.ResponseWriter, r *http.Request, u store.User) error {
	if r.PathValue("user_id") == u.ID {
		return domain.Errorf(domain.EInvalid, "you cannot disable yourself")
	}
	rev, err := s.Store.DisableUserAs(r.Context(), u, r.PathValue("user_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Disabled string `json:"disabled"`
		store.Revoked
	}{r.PathValue("user_id"), rev})
	return nil
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, u store.User) error {
	writeJSON(w, http.StatusOK, u)
	return nil
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, u store.User) error {
	return writeList(w, r, "deliveries", func(pg store.Page) ([]store.Delivery, string, error) {
		return s.Store.Deliveries(r.Context(), u, strings.ToUpper(r.URL.Query().Get("state")), pg)
	})
}

func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request, u store.User) error {
	if err := s.Store.RetryDelivery(r.Context(), u, r.PathValue("guid")); err != nil {
		return err
	}
	if s.OnDelivery != nil {
		_ = s.OnDelivery(r.Context()) // noted in the retry's transaction
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"retrying": r.PathValue("guid")})
	return nil
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
