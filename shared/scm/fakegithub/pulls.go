package fakegithub

import (
	"fmt"
	"net/http"
	"strconv"
)

// PullRequest is a pull request as the fake serves it: enough of GitHub's
// shape for ForgeCI to tell a fork from a branch of the repository and
// who opened it.
type PullRequest struct {
	Number int
	// BaseRepoID and BaseFullName are the repository the pull request is
	// into; HeadRepoID and HeadFullName where its branch lives (equal to
	// the base for a branch of the same repository; HeadRepoID 0 serves a
	// null head repository, as GitHub does once a fork is deleted).
	BaseRepoID   int64
	BaseFullName string
	BaseRef      string
	HeadRepoID   int64
	HeadFullName string
	HeadRef      string
	HeadSHA      string
	UserID       int64
	UserLogin    string
	// Files are the paths the pull request changes (its files route).
	Files []string
}

// AddPullRequest serves pr at GET /repos/{base}/pulls/{number}.
func (g *GitHub) AddPullRequest(pr PullRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pulls[fmt.Sprintf("%s#%d", pr.BaseFullName, pr.Number)] = pr
}

func (g *GitHub) getPull(w http.ResponseWriter, r *http.Request) {
	pr, ok := find(g, w, r, g.pulls, fullName(r)+"#"+r.PathValue("number"), http.StatusNotFound, "Not Found")
	if !ok {
		return
	}
	var head any
	if pr.HeadRepoID != 0 {
		head = map[string]any{"id": pr.HeadRepoID, "full_name": pr.HeadFullName}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"number": pr.Number, "state": "open",
		"user": map[string]any{"id": pr.UserID, "login": pr.UserLogin},
		"head": map[string]any{"ref": pr.HeadRef, "sha": pr.HeadSHA, "repo": head},
		"base": map[string]any{"ref": pr.BaseRef, "repo": map[string]any{"id": pr.BaseRepoID, "full_name": pr.BaseFullName}},
	})
}

// pullFiles serves a pull request's changed files, paged as GitHub's
// (per_page, at most 100; page from 1).
func (g *GitHub) pullFiles(w http.ResponseWriter, r *http.Request) {
	pr, ok := find(g, w, r, g.pulls, fullName(r)+"#"+r.PathValue("number"), http.StatusNotFound, "Not Found")
	if !ok {
		return
	}
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 || per > 100 {
		per = 30
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	page = max(page, 1)
	from := min((page-1)*per, len(pr.Files))
	to := min(from+per, len(pr.Files))
	if to < len(pr.Files) {
		next := *r.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(page+1))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.Server.URL, next.RequestURI()))
	}
	out := []map[string]any{}
	for _, f := range pr.Files[from:to] {
		out = append(out, map[string]any{"filename": f, "status": "modified"})
	}
	writeJSON(w, http.StatusOK, out)
}

// AddComparison serves the paths changed between base and head at GET
// /repos/{fullName}/compare/{base}...{head} (at most 300, as GitHub's).
func (g *GitHub) AddComparison(fullName, base, head string, files []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.compares[fullName+"@"+base+"..."+head] = files
}

func (g *GitHub) compare(w http.ResponseWriter, r *http.Request) {
	files, ok := find(g, w, r, g.compares, fullName(r)+"@"+r.PathValue("basehead"), http.StatusNotFound, "Not Found")
	if !ok {
		return
	}
	out := []map[string]any{}
	for _, f := range files[:min(len(files), 300)] {
		out = append(out, map[string]any{"filename": f, "status": "modified"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ahead", "files": out})
}

// find answers an authorized request with what m holds at key; otherwise
// it writes the error (status, message) and reports false.
func find[T any](g *GitHub, w http.ResponseWriter, r *http.Request, m map[string]T, key string, status int, message string) (T, bool) {
	var v T
	if !g.authorized(w, r) {
		return v, false
	}
	g.mu.Lock()
	v, ok := m[key]
	g.mu.Unlock()
	if !ok {
		fail(w, status, message)
	}
	return v, ok
}
