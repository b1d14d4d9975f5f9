package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/store"
)

// Dispatcher makes manual runs (package api's Server): the inputs a ref's
// pipeline asks for, and the run.
type Dispatcher interface {
	DispatchInputs(ctx context.Context, u store.User, project, ref string) ([]pipeline.Input, error)
	Dispatch(ctx context.Context, u store.User, project, ref string, inputs map[string]string) (api.Dispatched, error)
	// ArtifactURL is a presigned download of an artifact, for a user
	// who may read its run.
	ArtifactURL(ctx context.Context, u store.User, runID, jobID, name string) (string, error)
}

// Artifact sends the browser to a presigned download of an artifact,
// issued only after the read check.
func Artifact(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	url, err := u.Runs.ArtifactURL(r.Context(), user, r.PathValue("run_id"), r.PathValue("job_id"), r.PathValue("name"))
	if err != nil {
		return err
	}
	http.Redirect(w, r, url, http.StatusFound)
	return nil
}

type dispatchPage struct {
	page
	Project store.Project
	Ref     string
	Inputs  []pipeline.Input
}

// DispatchForm asks for a manual run of a project's ref: a field for each
// input its newest snapshot's pipeline declares, typed.
func DispatchForm(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	p, err := u.Store.GetProject(r.Context(), user, r.PathValue("project"))
	if err != nil {
		return err
	}
	ref := r.URL.Query().Get("ref")
	if ref == "" {
		ref = p.DefaultBranch
	}
	inputs, err := u.Runs.DispatchInputs(r.Context(), user, p.ID, ref)
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "dispatch", dispatchPage{page: page{Title: "Run " + p.Name, User: user}, Project: p, Ref: ref, Inputs: inputs})
	return nil
}

// DispatchRun starts the manual run the form asked for and opens it.
func DispatchRun(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	form, err := readForm(w, r, 64<<10)
	if err != nil {
		return err
	}
	project, ref := r.PathValue("project"), form.Get("ref")
	inputs := map[string]string{}
	for key, vals := range form {
		if name, ok := strings.CutPrefix(key, "input."); ok && name != "" && len(vals) > 0 {
			inputs[name] = vals[len(vals)-1]
		}
	}
	d, err := u.Runs.Dispatch(r.Context(), user, project, ref, inputs)
	if err != nil {
		return err
	}
	if d.Delivery != "" {
		// A GitHub project's run appears once the worker has fetched the
		// commit: its project's runs.
		p, err := u.Store.GetProject(r.Context(), user, project)
		if err != nil {
			return err
		}
		http.Redirect(w, r, "/?project="+url.QueryEscape(p.Name), http.StatusSeeOther)
		return nil
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(d.Run.ID), http.StatusSeeOther)
	return nil
}
