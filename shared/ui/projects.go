package ui

import (
	"net/http"
	"net/url"

	"github.com/forgeci/forgeci/shared/store"
)

// The project pages: the projects a user may read (global admins create
// them here), and a project's members and secret names, which its admins
// manage.

type projectsPage struct {
	page
	Projects []store.Project
	Next     string
}

// Projects lists the projects the user may read, a page at a time.
func Projects(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	ps, next, err := u.Store.ListProjects(r.Context(), user, pageOf(r, "cursor"))
	if err != nil {
		return err
	}
	u.render(w, http.StatusOK, "projects", projectsPage{page: page{Title: "Projects", User: user}, Projects: ps, Next: next})
	return nil
}

// maxSmallForm bounds the body of the dashboard's small forms.
const maxSmallForm = 8 << 10

// CreateProject makes a project (global admins) and opens it.
func CreateProject(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	form, err := readForm(w, r, maxSmallForm)
	if err != nil {
		return err
	}
	p, err := u.Store.CreateProjectAs(r.Context(), user, form.Get("name"), form.Get("default_branch"))
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/projects/"+url.PathEscape(p.ID), http.StatusSeeOther)
	return nil
}

type projectPage struct {
	page
	Project     store.Project
	Storage     store.Storage
	IsAdmin     bool // of the project: sees and manages members
	Members     []store.Member
	NextMembers string
	Secrets     []store.SecretInfo
	NextSecrets string
	Schedules   []store.ScheduleInfo
	// Notifications are the newest deliveries; Hooks (admins) where to.
	Notifications []store.NotificationInfo
	Hooks         []store.Hook
	// PassRate is each busy branch's pass rate, run after run (SVG).
	PassRate     svg
	Environments []store.Environment
	Variables    []store.Variable
}

// Project shows a project; its admins see and manage its members and see
// its secrets' names.
func Project(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	p, err := u.Store.GetProject(r.Context(), user, r.PathValue("project"))
	if err != nil {
		return err
	}
	st, err := u.Store.ProjectStorage(r.Context(), user, p.ID)
	if err != nil {
		return err
	}
	pp := projectPage{page: page{Title: p.Name, User: user}, Project: p, Storage: st, IsAdmin: p.Role == store.RoleAdmin}
	if pp.Schedules, err = u.Store.Schedules(r.Context(), user, p.ID); err != nil {
		return err
	}
	if pp.Notifications, _, err = u.Store.Notifications(r.Context(), user, p.ID, store.Page{Limit: 20}); err != nil {
		return err
	}
	trends, err := u.Store.BranchTrends(r.Context(), user, p.ID, 5, 50)
	if err != nil {
		return err
	}
	pp.PassRate = passRateChart(trends)
	if pp.Environments, err = u.Store.Environments(r.Context(), user, p.ID); err != nil {
		return err
	}
	if pp.Variables, _, err = u.Store.ListVariables(r.Context(), user, p.ID, store.Page{Limit: store.MaxVariables}); err != nil {
		return err
	}
	if pp.IsAdmin {
		if pp.Members, pp.NextMembers, err = u.Store.Members(r.Context(), user, p.ID, pageOf(r, "members")); err != nil {
			return err
		}
		if pp.Secrets, pp.NextSecrets, err = u.Store.ListSecrets(r.Context(), user, p.ID, pageOf(r, "secrets")); err != nil {
			return err
		}
		if pp.Hooks, err = u.Store.Hooks(r.Context(), user, p.ID); err != nil {
			return err
		}
	}
	u.render(w, http.StatusOK, "project", pp)
	return nil
}

// SetMember adds a member or changes their role (project admins).
func SetMember(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	form, err := readForm(w, r, maxSmallForm)
	if err != nil {
		return err
	}
	p, err := u.Store.GetProject(r.Context(), user, r.PathValue("project"))
	if err != nil {
		return err
	}
	if _, err := u.Store.SetMember(r.Context(), user, p.ID, form.Get("user"), form.Get("role"),
		form.Get("secrets") == "on"); err != nil {
		return err
	}
	http.Redirect(w, r, "/projects/"+url.PathEscape(p.ID), http.StatusSeeOther)
	return nil
}

// SetBadges makes the project's status badges public or private
// (project admins).
func SetBadges(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	// A form that cannot be read must not turn the badges private.
	form, err := readForm(w, r, maxSmallForm)
	if err != nil {
		return err
	}
	public := form.Get("public") == "on"
	p, err := u.Store.GetProject(r.Context(), user, r.PathValue("project"))
	if err != nil {
		return err
	}
	if err := u.Store.SetSettings(r.Context(), user, p.ID, store.Settings{BadgesPublic: &public}); err != nil {
		return err
	}
	http.Redirect(w, r, "/projects/"+url.PathEscape(p.ID), http.StatusSeeOther)
	return nil
}

// RemoveMember removes a member (project admins).
func RemoveMember(u *UI, w http.ResponseWriter, r *http.Request, user store.User) error {
	p, err := u.Store.GetProject(r.Context(), user, r.PathValue("project"))
	if err != nil {
		return err
	}
	if err := u.Store.RemoveMember(r.Context(), user, p.ID, r.PathValue("user_id")); err != nil {
		return err
	}
	http.Redirect(w, r, "/projects/"+url.PathEscape(p.ID), http.StatusSeeOther)
	return nil
}
