package scm

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-github/v62/github"
)

// DefaultAPIURL is GitHub's REST API.
const DefaultAPIURL = "https://api.github.com/"

// App authenticates as a GitHub App: a short-lived JWT signed with the
// App's private key buys an installation token (an hour long), which is
// what every repository call uses. A token opens one repository, by its
// ID: calls are made by name, and a name another repository took (the
// registered one renamed, transferred or deleted) is then not found
// rather than answered with a stranger's code. Tokens are cached per
// installation and repository, and renewed well before they expire.
type App struct {
	id   int64
	key  *rsa.PrivateKey
	base *url.URL
	http *http.Client

	mu     sync.Mutex
	tokens map[tokenScope]installationToken
}

type tokenScope struct{ installation, repository int64 }

type installationToken struct {
	token   string
	expires time.Time
}

// NewApp returns an App. apiURL is GitHub's REST API ("" for api.github.com).
func NewApp(appID int64, privateKeyPEM []byte, apiURL string) (*App, error) {
	if appID <= 0 {
		return nil, fmt.Errorf("the GitHub App ID must be a positive integer")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(privateKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("the GitHub App private key: %w", err)
	}
	if apiURL == "" {
		apiURL = DefaultAPIURL
	}
	if !strings.HasSuffix(apiURL, "/") {
		apiURL += "/"
	}
	base, err := url.Parse(apiURL)
	if err != nil {
		return nil, fmt.Errorf("the GitHub API URL: %w", err)
	}
	// Every call is bounded: a hung GitHub must not hold a delivery lease
	// past its expiry without the worker noticing.
	return &App{id: appID, key: key, base: base, http: &http.Client{Timeout: 30 * time.Second},
		tokens: map[tokenScope]installationToken{}}, nil
}

// appJWT is the App's own credential, valid for ten minutes; iat is set a
// minute back to allow for clock drift between us and GitHub.
func (a *App) appJWT() (string, error) {
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)),
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
		Issuer:    strconv.FormatInt(a.id, 10),
	}).SignedString(a.key)
}

func (a *App) client(token string) *github.Client {
	c := github.NewClient(a.http).WithAuthToken(token)
	c.BaseURL = a.base
	return c
}

// Client returns a GitHub client authenticated as the installation, for
// repository repoID (its GitHub ID) only.
func (a *App) Client(ctx context.Context, installationID, repoID int64) (*github.Client, error) {
	scope := tokenScope{installationID, repoID}
	a.mu.Lock()
	t, ok := a.tokens[scope]
	a.mu.Unlock()
	if !ok || time.Until(t.expires) < 5*time.Minute {
		jwtToken, err := a.appJWT()
		if err != nil {
			return nil, err
		}
		it, _, err := a.client(jwtToken).Apps.CreateInstallationToken(ctx, installationID,
			&github.InstallationTokenOptions{RepositoryIDs: []int64{repoID}})
		if err != nil {
			return nil, fmt.Errorf("installation %d token for repository %d: %w", installationID, repoID, err)
		}
		t = installationToken{token: it.GetToken(), expires: it.GetExpiresAt().Time}
		a.mu.Lock()
		a.tokens[scope] = t
		a.mu.Unlock()
	}
	return a.client(t.token), nil
}

// Forget drops the installation tokens cached for repository repoID:
// GitHub refused one (401), revoked before it would have expired (a
// permission changed, the App's key rotated), and the next call asks for
// a new one rather than fail with it for up to an hour.
func (a *App) Forget(repoID int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for scope := range a.tokens {
		if scope.repository == repoID {
			delete(a.tokens, scope)
		}
	}
}

// statusOf is the HTTP status of GitHub's answer to a call that failed
// (0: not an answer of GitHub's, or a rate limit, which has its own error
// types).
func statusOf(err error) int {
	var ge *github.ErrorResponse
	if errors.As(err, &ge) && ge.Response != nil {
		return ge.Response.StatusCode
	}
	return 0
}

// unauthorized reports whether GitHub refused a call's credentials.
func unauthorized(err error) bool { return statusOf(err) == http.StatusUnauthorized }

// permanent reports whether a GitHub error will not go away by retrying:
// the repository or commit is gone, or the request is refused as invalid.
// Rate limits, 5xx and network errors are worth retrying.
func permanent(err error) bool {
	switch statusOf(err) {
	case http.StatusNotFound, http.StatusGone, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

func splitFullName(full string) (owner, repo string, err error) {
	owner, repo, ok := strings.Cut(full, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return "", "", fmt.Errorf("repository name %q is not owner/name", full)
	}
	return owner, repo, nil
}
