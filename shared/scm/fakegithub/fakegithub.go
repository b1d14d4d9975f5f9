// Package fakegithub is an httptest fake of the parts of GitHub's REST API
// ForgeCI uses: App installation tokens (checking the App's JWT), repository
// tarballs (a 302 to a signed download, as codeload does), and check runs.
// and pull requests. It records every call and injects faults: the whole API down, or a
// request applied and its response then dropped (the connection closed).
package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/forgeci/forgeci/shared/fakefault"
)

// CheckRun is a check run as the fake stores it.
type CheckRun struct {
	ID         int64  `json:"id"`
	Repo       string `json:"-"`
	Name       string `json:"name"`
	HeadSHA    string `json:"head_sha"`
	ExternalID string `json:"external_id"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion,omitempty"`
	DetailsURL string `json:"details_url,omitempty"`
	Output     struct {
		Title   string `json:"title"`
		Summary string `json:"summary"`
	} `json:"output"`
	// Annotations are every annotation sent (GitHub adds each request's
	// to the check run's).
	Annotations []Annotation `json:"-"`
	// Updates counts PATCHes applied.
	Updates int `json:"-"`
}

// Call is one request the fake answered (or dropped).
type Call struct {
	Method, Path string
	Status       int // 0 when the response was dropped
}

// GitHub is the fake.
type GitHub struct {
	Server *httptest.Server
	AppID  int64
	Key    *rsa.PrivateKey

	mu        sync.Mutex
	tarballs  map[string][]byte  // "owner/repo@sha"
	downloads map[string]string  // download token -> tarball key
	tokens    map[string][]int64 // installation token -> the repository IDs it opens (none: all)
	repos     map[int64]string   // repository ID -> its name now
	checks    map[int64]*CheckRun
	pulls     map[string]PullRequest // "owner/repo#number"
	compares  map[string][]string    // "owner/repo@base...head" -> changed paths
	refs      map[string]string      // "owner/repo@ref" -> sha
	defaults  map[string]string      // "owner/repo" -> default branch (main)
	nextID    int64
	calls     []Call
	// SetDown makes every API call answer 503; DropResponses takes a
	// route such as "POST /repos/{owner}/{repo}/check-runs".
	fakefault.Switches
	// BeforeTarball, when set, runs before a tarball download is served
	// (a test can block here, then kill the worker).
	BeforeTarball func()
}

// New starts a fake GitHub with a fresh App key; it stops with the test.
func New(t testing.TB) *GitHub {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := &GitHub{AppID: 4242, Key: key, tarballs: map[string][]byte{}, downloads: map[string]string{},
		tokens: map[string][]int64{}, repos: map[int64]string{}, checks: map[int64]*CheckRun{}, pulls: map[string]PullRequest{}, compares: map[string][]string{}, refs: map[string]string{}, defaults: map[string]string{}, nextID: 9000}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", g.accessToken)
	mux.HandleFunc("GET /repos/{owner}/{repo}/tarball/{ref}", g.tarballLink)
	mux.HandleFunc("GET /_codeload/{token}", g.codeload)
	mux.HandleFunc("POST /repos/{owner}/{repo}/check-runs", g.createCheck)
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/check-runs/{id}", g.updateCheck)
	mux.HandleFunc("GET /repos/{owner}/{repo}/commits/{ref}/check-runs", g.listChecks)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls/{number}", g.getPull)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls/{number}/files", g.pullFiles)
	mux.HandleFunc("GET /repos/{owner}/{repo}/compare/{basehead}", g.compare)
	mux.HandleFunc("GET /repos/{owner}/{repo}/contents/{path...}", g.contents)
	mux.HandleFunc("GET /repos/{owner}/{repo}/commits/{ref...}", g.commitSHA)
	mux.HandleFunc("GET /repos/{owner}/{repo}", g.repository)
	mux.HandleFunc("GET /repositories/{id}", g.repositoryByID)
	g.Server = httptest.NewServer(g.faults(mux))
	t.Cleanup(g.Server.Close)
	return g
}

// URL is the API base URL to give the client.
func (g *GitHub) URL() string { return g.Server.URL + "/" }

// PrivateKeyPEM is the App's private key, as GitHub hands it out.
func (g *GitHub) PrivateKeyPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(g.Key)})
}

// AddTarball serves data as the tarball of owner/repo at sha.
func (g *GitHub) AddTarball(fullName, sha string, data []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tarballs[fullName+"@"+sha] = data
}

// AddGitCommit serves the tarball of commit sha of the git checkout at dir,
// made by `git archive` with GitHub's layout (one top directory).
func (g *GitHub) AddGitCommit(t testing.TB, fullName, dir, sha string) {
	prefix := strings.ReplaceAll(fullName, "/", "-") + "-" + sha[:7] + "/"
	out, err := exec.Command("git", "-C", dir, "archive", "--format=tar.gz", "--prefix="+prefix, sha).Output()
	if err != nil {
		t.Fatalf("git archive: %v", err)
	}
	g.AddTarball(fullName, sha, out)
}

// Calls returns the calls so far.
func (g *GitHub) Calls() []Call {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Call(nil), g.calls...)
}

// CountCalls counts calls with this method whose path has this suffix-free
// pattern prefix.
func (g *GitHub) CountCalls(method, pathPrefix string) int {
	n := 0
	for _, c := range g.Calls() {
		if c.Method == method && strings.HasPrefix(c.Path, pathPrefix) {
			n++
		}
	}
	return n
}

// CheckRuns returns the check runs of a repository, by ID.
func (g *GitHub) CheckRuns(fullName string) []CheckRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []CheckRun
	for _, c := range g.checks {
		if c.Repo == fullName {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// faults wraps the API with the down switch, dropped responses and the
// call log.
func (g *GitHub) faults(next *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := next.Handler(r)
		down, drop := g.Next(pattern)
		down = down && !strings.HasPrefix(r.URL.Path, "/_codeload/")
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		switch {
		case down:
			rec.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"message":"Service Unavailable"}`))
		case drop:
			fakefault.Drop(w, func(w http.ResponseWriter) { next.ServeHTTP(w, r) })
			rec.status = 0
		default:
			next.ServeHTTP(rec, r)
		}
		g.mu.Lock()
		g.calls = append(g.calls, Call{Method: r.Method, Path: r.URL.Path, Status: rec.status})
		g.mu.Unlock()
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// accessToken checks the App JWT as GitHub does (RS256, signed by the App's
// key, issuer the App ID, not expired, at most ten minutes long).
func (g *GitHub) accessToken(w http.ResponseWriter, r *http.Request) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		fail(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	claims := &jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return &g.Key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(strconv.FormatInt(g.AppID, 10)), jwt.WithExpirationRequired())
	if err != nil || claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 11*time.Minute {
		fail(w, http.StatusUnauthorized, fmt.Sprintf("'Issuer' claim or signature is invalid: %v", err))
		return
	}
	if _, err := strconv.ParseInt(r.PathValue("id"), 10, 64); err != nil {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	var opts struct {
		RepositoryIDs []int64 `json:"repository_ids"`
	}
	_ = json.NewDecoder(r.Body).Decode(&opts) // no body: every repository
	token := "ghs_" + randomHex(18)
	g.mu.Lock()
	g.tokens[token] = opts.RepositoryIDs
	g.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"token": token,
		"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
}

// authorized checks an installation token, and that it opens the
// repository named (as GitHub: another is not found).
// RevokeTokens ends every installation token handed out (as GitHub does
// when an installation's permissions change): later calls with them get
// 401.
func (g *GitHub) RevokeTokens() {
	g.mu.Lock()
	clear(g.tokens)
	g.mu.Unlock()
}

func (g *GitHub) authorized(w http.ResponseWriter, r *http.Request) bool {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	scope, ok := g.tokens[token]
	g.mu.Unlock()
	if !ok {
		fail(w, http.StatusUnauthorized, "Bad credentials")
		return false
	}
	if !g.opens(scope, r) {
		fail(w, http.StatusNotFound, "Not Found")
		return false
	}
	return true
}

func fullName(r *http.Request) string { return r.PathValue("owner") + "/" + r.PathValue("repo") }

func (g *GitHub) tarballLink(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	key := fullName(r) + "@" + r.PathValue("ref")
	g.mu.Lock()
	_, ok := g.tarballs[key]
	token := randomHex(12)
	if ok {
		g.downloads[token] = key
	}
	g.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	w.Header().Set("Location", g.Server.URL+"/_codeload/"+token)
	w.WriteHeader(http.StatusFound)
}

func (g *GitHub) codeload(w http.ResponseWriter, r *http.Request) {
	if g.BeforeTarball != nil {
		g.BeforeTarball()
	}
	g.mu.Lock()
	data, ok := g.tarballs[g.downloads[r.PathValue("token")]]
	g.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/x-gzip")
	_, _ = w.Write(data)
}

type checkRequest struct {
	Name       *string `json:"name"`
	HeadSHA    string  `json:"head_sha"`
	ExternalID *string `json:"external_id"`
	Status     *string `json:"status"`
	Conclusion *string `json:"conclusion"`
	DetailsURL *string `json:"details_url"`
	Output     *struct {
		Title       string       `json:"title"`
		Summary     string       `json:"summary"`
		Annotations []Annotation `json:"annotations"`
	} `json:"output"`
}

// Annotation is a check run annotation as GitHub takes one.
type Annotation struct {
	Path            string `json:"path"`
	StartLine       int    `json:"start_line"`
	EndLine         int    `json:"end_line"`
	AnnotationLevel string `json:"annotation_level"`
	Message         string `json:"message"`
	Title           string `json:"title,omitempty"`
	RawDetails      string `json:"raw_details,omitempty"`
}

var validConclusions = map[string]bool{"success": true, "failure": true, "neutral": true, "cancelled": true,
	"skipped": true, "timed_out": true, "action_required": true}

// apply validates req as GitHub does and writes it into c.
func apply(c *CheckRun, req checkRequest) string {
	if req.Name != nil {
		c.Name = *req.Name
	}
	if req.ExternalID != nil {
		c.ExternalID = *req.ExternalID
	}
	if req.DetailsURL != nil {
		c.DetailsURL = *req.DetailsURL
	}
	if req.Status != nil {
		switch *req.Status {
		case "queued", "in_progress", "completed":
			c.Status = *req.Status
		default:
			return "status is not one of queued, in_progress, completed"
		}
	}
	if req.Conclusion != nil {
		if !validConclusions[*req.Conclusion] {
			return "conclusion is not valid"
		}
		c.Conclusion = *req.Conclusion
		c.Status = "completed"
	}
	if c.Status == "completed" && c.Conclusion == "" {
		return "conclusion is required when status is completed"
	}
	if c.Status != "completed" {
		c.Conclusion = ""
	}
	if req.Output != nil {
		if req.Output.Title == "" || req.Output.Summary == "" {
			return "output needs a title and a summary"
		}
		if msg := outputBounds(req.Output.Summary, req.Output.Annotations); msg != "" {
			return msg
		}
		c.Output.Title, c.Output.Summary = req.Output.Title, req.Output.Summary
		if len(req.Output.Annotations) > 50 {
			return "at most 50 annotations a request"
		}
		for _, a := range req.Output.Annotations {
			if a.Path == "" || a.StartLine <= 0 || a.EndLine < a.StartLine || a.Message == "" ||
				(a.AnnotationLevel != "notice" && a.AnnotationLevel != "warning" && a.AnnotationLevel != "failure") {
				return "an annotation needs path, start_line, end_line, annotation_level and message"
			}
		}
		c.Annotations = append(append([]Annotation(nil), c.Annotations...), req.Output.Annotations...)
	}
	return ""
}

func (g *GitHub) createCheck(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	var req checkRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == nil || *req.Name == "" || len(req.HeadSHA) != 40 {
		fail(w, http.StatusUnprocessableEntity, "name and head_sha are required")
		return
	}
	c := &CheckRun{Repo: fullName(r), HeadSHA: req.HeadSHA, Status: "queued"}
	if msg := apply(c, req); msg != "" {
		fail(w, http.StatusUnprocessableEntity, msg)
		return
	}
	g.mu.Lock()
	g.nextID++
	c.ID = g.nextID
	g.checks[c.ID] = c
	out := *c
	g.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}

func (g *GitHub) updateCheck(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var req checkRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.checks[id]
	if !ok || c.Repo != fullName(r) {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	next := *c
	if msg := apply(&next, req); msg != "" {
		fail(w, http.StatusUnprocessableEntity, msg)
		return
	}
	next.Updates++
	*c = next
	writeJSON(w, http.StatusOK, next)
}

func (g *GitHub) listChecks(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	name := r.URL.Query().Get("check_name")
	var out []CheckRun
	for _, c := range g.CheckRuns(fullName(r)) {
		if c.HeadSHA == r.PathValue("ref") && (name == "" || c.Name == name) {
			out = append(out, c)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(out), "check_runs": out})
}
