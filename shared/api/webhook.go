package api

import (
	"net/http"

	"github.com/forgeci/forgeci/shared/domain"
)

// githubWebhook takes a GitHub webhook delivery.
func (s *Server) githubWebhook(w http.ResponseWriter, r *http.Request) error {
	return domain.Errorf(domain.ENotImplemented, "webhook intake is being built")
}
