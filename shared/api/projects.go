package api

import (
	"context"
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
	return answerTo(w, r, http.StatusCreated, func(ctx context.Context, req createProjectRequest) (any, error) {
		return s.Store.CreateProjectAs(ctx, u, req.Name, req.DefaultBranch)
	})
}

// project resolves {project} to a project the caller may read.
func (s *Server) project(r *http.Request, u store.User) (store.Project, error) {
	return s.Store.GetProject(r.Context(), u, r.PathValue("project"))
}

// inProject resolves {project} for the caller and answers what do returns
// about it; the store authorises do against the caller's membership.
func (s *Server) inProject(w http.ResponseWriter, r *http.Request, u store.User,
	do func(ctx context.Context, p store.Project) (any, error)) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	answer, err := do(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.inProject(w, r, u, func(_ context.Context, p store.Project) (any, error) { return p, nil })
}

func (s *Server) listMembers(w http.ResponseWriter, r *http.Request, u store.User) error {
	return listInProject(s, w, r, u, "members", s.Store.Members)
}

// listInProject answers one page of a list of {project}'s.
func listInProject[T any](s *Server, w http.ResponseWriter, r *http.Request, u store.User, name string,
	list func(ctx context.Context, u store.User, projectID string, pg store.Page) ([]T, string, error)) error {
	p, err := s.project(r, u)
	if err != nil {
		return err
	}
	return writeList(w, r, name, func(pg store.Page) ([]T, string, error) { return list(r.Context(), u, p.ID, pg) })
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
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return s.Store.SetMember(ctx, u, p.ID, req.User, req.Role, req.Secrets)
	})
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request, u store.User) error {
	id := r.PathValue("user_id")
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return map[string]any{"removed": id}, s.Store.RemoveMember(ctx, u, p.ID, id)
	})
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, u store.User) error {
	return listInProject(s, w, r, u, "secrets", s.Store.ListSecrets)
}

type secretRequest struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Environment scopes the secret to one environment's jobs.
	Environment string `json:"environment"`
}

// setSecret seals and stores a secret. The value is never returned.
func (s *Server) setSecret(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req secretRequest
	if err := decodeJSON(w, r, 128<<10, &req); err != nil {
		return err
	}
	env, err := optionalEnvironment(req.Environment)
	if err != nil {
		return err
	}
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return map[string]any{"name": req.Name, "environment": env}, s.Store.SetScopedSecret(ctx, u, p.ID, env, req.Name, req.Value)
	})
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, u store.User) error {
	name := r.PathValue("name")
	env, err := optionalEnvironment(r.URL.Query().Get("environment"))
	if err != nil {
		return err
	}
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return map[string]any{"deleted": name, "environment": env}, s.Store.DeleteSecret(ctx, u, p.ID, env, name)
	})
}

func (s *Server) listVariables(w http.ResponseWriter, r *http.Request, u store.User) error {
	return listInProject(s, w, r, u, "variables", s.Store.ListVariables)
}

// setVariable sets a project variable (the vars context).
func (s *Server) setVariable(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	// JSON may escape each byte of a 48 KiB value as \u00XX.
	if err := decodeJSON(w, r, 6*store.MaxVariableBytes+4<<10, &req); err != nil {
		return err
	}
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return map[string]any{"name": req.Name}, s.Store.SetVariable(ctx, u, p.ID, req.Name, req.Value)
	})
}

func (s *Server) deleteVariable(w http.ResponseWriter, r *http.Request, u store.User) error {
	name := r.PathValue("name")
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return map[string]any{"deleted": name}, s.Store.DeleteVariable(ctx, u, p.ID, name)
	})
}

// getStorage is what a project keeps: runs, log, artifact, cache and blob
// bytes, its retention and quotas.
func (s *Server) getStorage(w http.ResponseWriter, r *http.Request, u store.User) error {
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		return s.Store.ProjectStorage(ctx, u, p.ID)
	})
}

// setSettings changes a project's retention and quotas and answers with
// the project's storage as it now stands.
func (s *Server) setSettings(w http.ResponseWriter, r *http.Request, u store.User) error {
	var req store.Settings
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	return s.inProject(w, r, u, func(ctx context.Context, p store.Project) (any, error) {
		if err := s.Store.SetSettings(ctx, u, p.ID, req); err != nil {
			return nil, err
		}
		return s.Store.ProjectStorage(ctx, u, p.ID)
	})
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
