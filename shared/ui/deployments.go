package ui

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/store"
)

type environmentPage struct {
	page
	Project     store.Project
	Environment store.Environment
	Known       bool // made by an admin; else a name jobs used without rules
	Deployments []store.Deployment
	Next        string
}

// Environment shows an environment's rules and its deployment history,
// newest first.
func Environment(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	p, err := u.Store.GetProject(r.Context(), user, r.PathValue("project"))
	if err != nil {
		return err
	}
	name, err := store.CheckEnvironmentName(r.PathValue("environment"))
	if err != nil {
		return err
	}
	ep := environmentPage{page: page{Title: name + " of " + p.Name, User: user}, Project: p,
		Environment: store.Environment{Name: name}}
	envs, err := u.Store.Environments(r.Context(), user, p.ID)
	if err != nil {
		return err
	}
	for _, e := range envs {
		if e.Name == name {
			ep.Environment, ep.Known = e, true
		}
	}
	if ep.Deployments, ep.Next, err = u.Store.Deployments(r.Context(), user, p.ID, name, pageOf(r, "cursor")); err != nil {
		return err
	}
	u.render(w, http.StatusOK, "environment", ep)
	return nil
}

// ApproveDeployment lets the deployment a job waits for go on.
func ApproveDeployment(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	return reviewDeployment(u, w, r, user, true)
}

// RejectDeployment fails the job whose deployment waits, with the
// reviewer's comment.
func RejectDeployment(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	return reviewDeployment(u, w, r, user, false)
}

func reviewDeployment(u *UI, w http.ResponseWriter, r *http.Request, user store.User, approve bool) error {
	form, err := readForm(w, r, maxSmallForm)
	if err != nil {
		return err
	}
	if _, err := u.Store.DecideDeployment(r.Context(), user, r.PathValue("run_id"), r.PathValue("job_id"), approve, form.Get("comment")); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(r), http.StatusSeeOther)
	return nil
}
