package fakegithub

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// AddRepository makes repository id known by name fullName: a token made
// for it (repository_ids) opens that name, and GET /repositories/{id}
// answers it.
func (g *GitHub) AddRepository(id int64, fullName string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repos[id] = fullName
}

// RenameRepository gives repository id another name, as a rename or a
// transfer does: its check runs go with it; the commits and refs served
// under the old name stay there (a new repository that took it).
func (g *GitHub) RenameRepository(id int64, fullName string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.checks {
		if c.Repo == g.repos[id] {
			c.Repo = fullName
		}
	}
	g.repos[id] = fullName
}

// opens reports whether a token of scope (repository IDs; none: all)
// opens the repository r names.
func (g *GitHub) opens(scope []int64, r *http.Request) bool {
	if len(scope) == 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if id := r.PathValue("id"); strings.HasPrefix(r.URL.Path, "/repositories/") {
		n, err := strconv.ParseInt(id, 10, 64)
		return err == nil && slices.Contains(scope, n)
	}
	name := r.PathValue("owner") + "/" + r.PathValue("repo")
	for id, n := range g.repos {
		if n == name && slices.Contains(scope, id) {
			return true
		}
	}
	return false
}

func (g *GitHub) repositoryByID(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	g.mu.Lock()
	name, ok := g.repos[id]
	branch := g.defaults[name]
	g.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	writeRepository(w, id, name, branch)
}

// outputBounds is GitHub's refusal of a check run output past its bounds
// (a summary of 65,535 characters, an annotation's title of 255, its
// message and raw details of 64 KB), or "".
func outputBounds(summary string, annotations []Annotation) string {
	if utf8.RuneCountInString(summary) > 65535 {
		return "output.summary is too long (maximum is 65535 characters)"
	}
	for _, a := range annotations {
		if utf8.RuneCountInString(a.Title) > 255 || len(a.Message) > 64<<10 || len(a.RawDetails) > 64<<10 {
			return "an annotation's title, message or raw_details is too long"
		}
	}
	return ""
}
