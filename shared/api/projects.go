package api

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// Projects, their members and their secrets. {project} in a path is the
// project's ID (or its name, URL-escaped, where the gateway passes %2F
// through); the store authorises each call against the caller's membership.

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request, u store.User) error {
	return writeList(w, r, "projects", func(pg store.Page) ([]store.Project, string, error) {
		return s.Store.ListProjects(r.Context(), u, pg)
	})
}

type createProjectRequest struct {
	Name          string `json:"name"`
	DefaultBranch string `json:"default_branch"`
}

func (s *Server) createProject(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req createProjectRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	p, err := s.Store.CreateProjectAs(r.Context(), u, req.Name, req.DefaultBranch)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, p)
	return nil
}

// project resolves {project} to a project the caller may read.
func (s *Server) project(r *http.Request, u store.User) (store.Project, error) {
	return s.Store.GetProject(r.Context(), u, r.PathValue("project"))
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request, u store.User) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *Server) listMembers(w http.ResponseWriter, r *http.Request, u store.User) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	return writeList(w, r, "members", func(pg store.Page) ([]store.Member, string, error) {
		return s.Store.Members(r.Context(), u, p.ID, pg)
	})
}

type memberRequest struct {
	User    string `json:"user"`
	Role    string `json:"role"`
	Secrets bool   `json:"secrets"`
}

// setMember adds a member or changes their role and secrets permission.
func (s *Server) setMember(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req memberRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if req.User == "" {
		return domain.Errorf(domain.EInvalid, "field user (a user name or ID) is required")
	}
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	m, err := s.Store.SetMember(r.Context(), u, p.ID, req.User, req.Role, req.Secrets)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request, u store.User) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	if err := s.Store.RemoveMember(r.Context(), u, p.ID, r.PathValue("user_id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("user_id")})
	return nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, u store.User) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	return writeList(w, r, "secrets", func(pg store.Page) ([]store.SecretInfo, string, error) {
		return s.Store.ListSecrets(r.Context(), u, p.ID, pg)
	})
}

type secretRequest struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// setSecret seals and stores a secret. The value is never returned.
func (s *Server) setSecret(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req secretRequest
	if err := decodeJSON(w, r, 128<<10, &req); err != nil {
		return err
	}
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	if err := s.Store.SetSecret(r.Context(), u, p.ID, req.Name, req.Value); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": req.Name})
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, u store.User) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteSecret(r.Context(), u, p.ID, r.PathValue("name")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": r.PathValue("name")})
	return nil
}

// getStorage is what a project keeps: runs, log, artifact, cache and blob
// bytes, its retention and quotas.
func (s *Server) getStorage(w http.ResponseWriter, r *http.Request, u store.User) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	st, err := s.Store.ProjectStorage(r.Context(), u, p.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// setSettings changes a project's retention and quotas.
func (s *Server) setSettings(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req store.Settings
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	if err := s.Store.SetSettings(r.Context(), u, p.ID, req); err != nil {
		return err
	}
	return s.getStorage(w, r, u) // the project as it now stands
}

// gcPlan says what the garbage collector would remove now (a dry run; the
// collection itself runs on its schedule).
func (s *Server) gcPlan(w http.ResponseWriter, r *http.Request, _ store.User) error {
	plan, err := s.Store.CollectGarbage(r.Context(), store.GCOptions{DryRun: true})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, plan)
	return nil
}
