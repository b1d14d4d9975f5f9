package api

import (
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
// missing or wrong signature is 401 and nothing is stored. A verified
// delivery of a known event is recorded under its delivery GUID and answered
// at once: GitHub waits 10 seconds, and the work (fetching the source,
// creating the run) is done by the scm worker, which OnDelivery wakes.
func (s *Server) githubWebhook(w http.ResponseWriter, r *http.Request) error {
	guid := r.Header.Get("X-GitHub-Delivery")
	event := r.Header.Get("X-GitHub-Event")
	sig := r.Header.Get("X-Hub-Signature-256")
	if sig == "" {
		// The SHA-1 X-Hub-Signature is not accepted.
		return domain.Errorf(domain.EUnauthorized, "X-Hub-Signature-256 is required")
	}
	secret, err := s.webhookSecret(r)
	if err != nil {
		return err
	}
	contentType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body := http.MaxBytesReader(w, r.Body, MaxWebhookBytes)
	payload, err := github.ValidatePayloadFromBody(contentType, body, sig, secret)
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
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.Repository.ID == 0 {
		return domain.Errorf(domain.EInvalid, "the %s payload has no repository", event)
	}
	if _, err := s.Store.Repository(r.Context(), p.Repository.ID); err != nil {
		if domain.ErrorCode(err) == domain.ENotFound {
			// An App installed on more repositories than are registered.
			writeJSON(w, http.StatusAccepted, map[string]any{"delivery": guid, "ignored": "repository is not registered"})
			return nil
		}
		return err
	}
	recorded, err := s.Store.RecordDelivery(r.Context(), guid, event, p.Repository.ID, payload)
	if err != nil {
		return err
	}
	if recorded && s.OnDelivery != nil {
		s.OnDelivery(r.Context())
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"delivery": guid, "duplicate": !recorded})
	return nil
}

// webhookSecret finds the secret to check the signature with, from headers
// only: GitHub names the webhook's target, and nothing of the body may be
// trusted before the signature is checked.
func (s *Server) webhookSecret(r *http.Request) ([]byte, error) {
	kind := r.Header.Get("X-GitHub-Hook-Installation-Target-Type")
	id, _ := strconv.ParseInt(r.Header.Get("X-GitHub-Hook-Installation-Target-ID"), 10, 64)
	switch kind {
	case "repository":
		repo, err := s.Store.Repository(r.Context(), id)
		if domain.ErrorCode(err) == domain.ENotFound {
			return nil, domain.Errorf(domain.EUnauthorized, "no webhook is registered for repository %d", id)
		}
		if err != nil {
			return nil, err
		}
		return []byte(repo.WebhookSecret), nil
	case "integration":
		if len(s.WebhookSecret) == 0 {
			return nil, domain.Errorf(domain.EUnauthorized, "no GitHub App webhook secret is configured")
		}
		return s.WebhookSecret, nil
	}
	return nil, domain.Errorf(domain.EUnauthorized, "unknown webhook target %q", kind)
}
