package fakegithub

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
)

// contents serves a file of a commit whose tarball the fake holds, at
// GET /repos/{owner}/{repo}/contents/{path}?ref=SHA, as GitHub's contents
// API does (base64).
func (g *GitHub) contents(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("ref")
	data, ok := find(g, w, r, g.tarballs, fullName(r)+"@"+ref, http.StatusNotFound, "No commit found for the ref "+ref)
	if !ok {
		return
	}
	want := r.PathValue("path")
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			fail(w, http.StatusNotFound, "Not Found")
			return
		}
		if _, rest, ok := strings.Cut(h.Name, "/"); ok && rest == want && h.Typeflag == tar.TypeReg {
			body, _ := io.ReadAll(tr)
			writeJSON(w, http.StatusOK, map[string]any{"type": "file", "encoding": "base64", "name": want, "path": want,
				"size": len(body), "content": base64.StdEncoding.EncodeToString(body)})
			return
		}
	}
}

// SetDefaultBranch makes branch fullName's default branch (main until
// set), as GET /repos/{owner}/{repo} answers.
func (g *GitHub) SetDefaultBranch(fullName, branch string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.defaults[fullName] = branch
}

// repository answers GET /repos/{owner}/{repo} for a repository the fake
// holds a commit or a ref of: its name and default branch.
func (g *GitHub) repository(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	name := fullName(r)
	g.mu.Lock()
	branch, known := g.defaults[name]
	for k := range g.refs {
		known = known || strings.HasPrefix(k, name+"@")
	}
	for k := range g.tarballs {
		known = known || strings.HasPrefix(k, name+"@")
	}
	g.mu.Unlock()
	if !known {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	writeRepository(w, 0, name, branch)
}

// writeRepository answers a repository as GitHub does (id 0: left out),
// its default branch main unless set.
func writeRepository(w http.ResponseWriter, id int64, fullName, branch string) {
	if branch == "" {
		branch = "main"
	}
	out := map[string]any{"full_name": fullName, "name": fullName[strings.IndexByte(fullName, '/')+1:], "default_branch": branch}
	if id != 0 {
		out["id"] = id
	}
	writeJSON(w, http.StatusOK, out)
}

// AddRef makes ref (a branch name, or refs/heads/..., refs/tags/...) of
// fullName resolve to sha, as GET /repos/{owner}/{repo}/commits/{ref}
// answers with the sha media type.
func (g *GitHub) AddRef(fullName, ref, sha string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refs[fullName+"@"+ref] = sha
}

func (g *GitHub) commitSHA(w http.ResponseWriter, r *http.Request) {
	sha, ok := find(g, w, r, g.refs, fullName(r)+"@"+r.PathValue("ref"), http.StatusUnprocessableEntity, "No commit found for SHA: "+r.PathValue("ref"))
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/vnd.github.sha")
	_, _ = io.WriteString(w, sha)
}
