package fakegithub

import (
	"fmt"
	"net/http"
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
}

// AddPullRequest serves pr at GET /repos/{base}/pulls/{number}.
func (g *GitHub) AddPullRequest(pr PullRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pulls[fmt.Sprintf("%s#%d", pr.BaseFullName, pr.Number)] = pr
}

func (g *GitHub) getPull(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	g.mu.Lock()
	pr, ok := g.pulls[fullName(r)+"#"+r.PathValue("number")]
	g.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "Not Found")
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
