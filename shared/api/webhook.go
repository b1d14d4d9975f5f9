package api

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/go-github/v62/github"

	"github.com/forgeci/forgeci/shared/domain"
)

// MaxWebhookBytes bounds a webhook body. GitHub caps payloads at 25 MB, but
// API Gateway takes at most 10 MB; a push that big is refused with 413.
const MaxWebhookBytes = 10 << 20

// webhookEvents are the events that can create runs. Every other event
// (ping, issues, ...) is acknowledged and ignored, and nothing is stored.
var webhookEvents = map[string]bool{"push": true, "pull_request": true}

// githubWebhook takes a GitHub webhook delivery. The signature is checked
// over the raw body before anything is parsed, with the secret of the
// webhook's target (a repository's own webhook, or the GitHub App's); a
// missing or wrong signature is 401 and nothing is stored. A valid
// signature says only who sent the body: the delivery is then bound to the
// repository it names, which must be the one whose secret verified it (a
// repository webhook) or be registered under the installation it names
// (the App's webhook, one secret for all installations); otherwise 401 and
// nothing is stored. A bound delivery is recorded under its delivery GUID
// and answered at once: GitHub waits 10 seconds, and the work (fetching the
// source, creating the run) is done by the scm worker, which OnDelivery
// wakes.
func (s *Server) githubWebhook(w http.ResponseWriter, r *http.Request) error {
	guid := r.Header.Get("X-GitHub-Delivery")
	event := r.Header.Get("X-GitHub-Event")
	sig := r.Header.Get("X-Hub-Signature-256")
	if sig == "" {
		// The SHA-1 X-Hub-Signature is not accepted.
		return domain.Errorf(domain.EUnauthorized, "X-Hub-Signature-256 is required")
	}
	target, err := s.webhookTarget(r)
	if err != nil {
		return err
	}
	contentType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body := http.MaxBytesReader(w, r.Body, MaxWebhookBytes)
	payload, err := github.ValidatePayloadFromBody(contentType, body, sig, target.secret)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return domain.Errorf(domain.ETooLarge, "webhook body is over %d bytes", MaxWebhookBytes)
		}
		if strings.Contains(err.Error(), "Content-Type") {
			return domain.Errorf(domain.EInvalid, "%v", err)
		}
		return domain.Errorf(domain.EUnauthorized, "webhook signature does not verify")
	}
	if !webhookEvents[event] {
		writeJSON(w, http.StatusAccepted, map[string]any{"delivery": guid, "ignored": "event " + event + " does not create runs"})
		return nil
	}
	if guid == "" || len(guid) > 100 {
		return domain.Errorf(domain.EInvalid, "X-GitHub-Delivery must be the delivery GUID")
	}
	var p struct {
		Repository struct {
			ID int64 `json:"id"`
		} `json:"repository"`
		Installation struct {
			ID int64 `json:"id"`
		} `json:"installation"`
		Ref         *string          `json:"ref"`
		PullRequest *json.RawMessage `json:"pull_request"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.Repository.ID == 0 {
		return domain.Errorf(domain.EInvalid, "the %s payload has no repository", event)
	}
	// The event name is an unsigned header: the signed body must have the
	// shape of that event, or a pull request's body could pass for a push.
	switch {
	case event == "push" && (p.Ref == nil || !strings.HasPrefix(*p.Ref, "refs/") || p.PullRequest != nil):
		return domain.Errorf(domain.EInvalid, "the body is not a push event's (no refs/... ref, or a pull_request)")
	case event == "pull_request" && (p.PullRequest == nil || p.Ref != nil):
		return domain.Errorf(domain.EInvalid, "the body is not a pull_request event's")
	}
	if err := s.bindDelivery(r, target, p.Repository.ID, p.Installation.ID); err != nil {
		if domain.ErrorCode(err) == domain.ENotFound {
			// An App installed on more repositories than are registered.
			writeJSON(w, http.StatusAccepted, map[string]any{"delivery": guid, "ignored": "repository is not registered"})
			return nil
		}
		return err
	}
	rec, err := s.Store.RecordDelivery(r.Context(), guid, event, p.Repository.ID, payload)
	if err != nil {
		return err
	}
	// A redelivery kicks only when its note could not be made: a body
	// replayed under its GUID must not buy a Lambda invoke each time.
	if rec.Waiting && (rec.New || rec.Unnoted != nil) {
		if err := s.wakeWorker(r.Context(), guid, rec.Unnoted); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"delivery": guid, "duplicate": !rec.New})
	return nil
}

// wakeWorker kicks the GitHub worker for a recorded delivery that waits
// for it. The store's note (unless unnoted says why not) or the kick is
// enough. With neither, nothing would look at the delivery until the next
// event: it stays recorded, and the answer is 503 so that GitHub shows the
// failure; redelivering it (the same GUID) notes it again, and kicks
// while the note still fails.
func (s *Server) wakeWorker(ctx context.Context, guid string, unnoted error) error {
	kicked := errors.New("no worker to kick")
	if s.OnDelivery != nil {
		kicked = s.OnDelivery(ctx)
	}
	if unnoted == nil || kicked == nil {
		return nil
	}
	return domain.Errorf(domain.EUnavailable, "delivery %s is recorded, but the GitHub worker could not be woken "+
		"(its note: %v; its kick: %v): redeliver it from GitHub once that works, or it waits for the next event", guid, unnoted, kicked)
}

// webhookTarget is the webhook a delivery claims to come from, and the
// secret that must have signed it.
type webhookTarget struct {
	app    bool  // the GitHub App's webhook
	repoID int64 // a repository webhook's repository
	secret []byte
}

// webhookTarget finds the secret to check the signature with, from headers
// only: GitHub names the webhook's target, and nothing of the body may be
// trusted before the signature is checked.
func (s *Server) webhookTarget(r *http.Request) (webhookTarget, error) {
	kind := r.Header.Get("X-GitHub-Hook-Installation-Target-Type")
	id, _ := strconv.ParseInt(r.Header.Get("X-GitHub-Hook-Installation-Target-ID"), 10, 64)
	switch kind {
	case "repository":
		repo, err := s.Store.Repository(r.Context(), id)
		if domain.ErrorCode(err) == domain.ENotFound {
			return webhookTarget{}, domain.Errorf(domain.EUnauthorized, "no webhook is registered for repository %d", id)
		}
		if err != nil {
			return webhookTarget{}, err
		}
		return webhookTarget{repoID: repo.GitHubID, secret: []byte(repo.WebhookSecret)}, nil
	case "integration":
		if len(s.WebhookSecret) == 0 {
			return webhookTarget{}, domain.Errorf(domain.EUnauthorized, "no GitHub App webhook secret is configured")
		}
		return webhookTarget{app: true, secret: s.WebhookSecret}, nil
	}
	return webhookTarget{}, domain.Errorf(domain.EUnauthorized, "unknown webhook target %q", kind)
}

// bindDelivery checks that a verified delivery is about a repository its
// signer speaks for: a repository webhook only for its own repository, the
// App only for a repository registered under the installation the delivery
// names. ENotFound: the App's delivery is about an unregistered repository.
func (s *Server) bindDelivery(r *http.Request, t webhookTarget, repoID, installationID int64) error {
	if !t.app {
		if repoID != t.repoID {
			return domain.Errorf(domain.EUnauthorized, "the delivery was signed for repository %d but is about repository %d", t.repoID, repoID)
		}
		return nil
	}
	repo, err := s.Store.Repository(r.Context(), repoID)
	if err != nil {
		return err
	}
	if installationID == 0 || installationID != repo.InstallationID {
		return domain.Errorf(domain.EUnauthorized, "repository %d is not registered under installation %d", repoID, installationID)
	}
	return nil
}
