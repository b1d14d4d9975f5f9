package api

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/store"
)

// optionalEnvironment checks an environment name that may be empty.
func optionalEnvironment(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	return store.CheckEnvironmentName(name)
}

type environmentRequest struct {
	ReviewerRole      string   `json:"reviewer_role"`
	AllowedRefs       []string `json:"allowed_refs"`
	PreventSelfReview bool     `json:"prevent_self_review"`
}

// setEnvironment makes or replaces an environment's rules (project
// admins): PUT-like, a field left out is cleared.
func (s *Server) setEnvironment(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req environmentRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	e, err := s.Store.SetEnvironment(r.Context(), u, r.PathValue("project"), store.Environment{
		Name: r.PathValue("environment"), ReviewerRole: req.ReviewerRole, AllowedRefs: req.AllowedRefs,
		PreventSelfReview: req.PreventSelfReview})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

func (s *Server) listEnvironments(w http.ResponseWriter, r *http.Request, u store.User) error {
	list, err := s.Store.Environments(r.Context(), u, r.PathValue("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"environments": list})
	return nil
}

func (s *Server) deleteEnvironment(w http.ResponseWriter, r *http.Request, u store.User) error {
	name := r.PathValue("environment")
	if err := s.Store.DeleteEnvironment(r.Context(), u, r.PathValue("project"), name); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
	return nil
}

// listDeployments is a page of a project's deployments, newest first
// (?environment= for one environment's history).
func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request, u store.User) error {
	return writeList(w, r, "deployments", func(pg store.Page) ([]store.Deployment, string, error) {
		return s.Store.Deployments(r.Context(), u, r.PathValue("project"), r.URL.Query().Get("environment"), pg)
	})
}

type reviewRequest struct {
	Comment string `json:"comment"`
}

func (s *Server) approveDeployment(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.reviewDeployment(w, r, u, true)
}

func (s *Server) rejectDeployment(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.reviewDeployment(w, r, u, false)
}

// reviewDeployment approves or rejects the deployment a job waits for.
func (s *Server) reviewDeployment(w http.ResponseWriter, r *http.Request, u store.User, approve bool) error {
	var req reviewRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, maxBody, &req); err != nil {
			return err
		}
	}
	job, err := s.Store.DecideDeployment(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"), approve, req.Comment)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}
