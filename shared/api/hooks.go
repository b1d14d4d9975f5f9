package api

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/store"
)

type hookRequest struct {
	URL    string   `json:"url"`
	Format string   `json:"format"`
	Events []string `json:"events"`
}

// addHook makes a notification hook (project admins); its signing
// secret is in the answer, once.
func (s *Server) addHook(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req hookRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	h, secret, err := s.Store.AddHook(r.Context(), u, r.PathValue("project"), req.URL, req.Format, req.Events)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"hook": h, "secret": secret})
	return nil
}

func (s *Server) listHooks(w http.ResponseWriter, r *http.Request, u store.User) error {
	hooks, err := s.Store.Hooks(r.Context(), u, r.PathValue("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"hooks": hooks})
	return nil
}

func (s *Server) deleteHook(w http.ResponseWriter, r *http.Request, u store.User) error {
	if err := s.Store.DeleteHook(r.Context(), u, r.PathValue("project"), r.PathValue("hook_id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("hook_id")})
	return nil
}

// listNotifications answers a page of a project's deliveries, newest
// first, with their state and last error.
func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request, u store.User) error {
	return writeList(w, r, "notifications", func(pg store.Page) ([]store.NotificationInfo, string, error) {
		return s.Store.Notifications(r.Context(), u, r.PathValue("project"), pg)
	})
}
