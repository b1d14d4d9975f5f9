package api

import (
	"context"
	"net/http"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// listArtifacts lists a run's artifacts: each job's (its current
// attempt's) with size, digest and when it goes.
func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request, u store.User) error {
	list, err := s.Store.RunArtifacts(r.Context(), u, r.PathValue("run_id"))
	if err != nil {
		return err
	}
	if list == nil {
		list = []store.ArtifactInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"artifacts": list})
	return nil
}

// artifactDownload is where to download an artifact: a presigned GET,
// issued only after the store found the caller may read the run, valid
// until url_expires_at.
type artifactDownload struct {
	URL       string    `json:"url"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	ExpiresAt time.Time `json:"url_expires_at"`
}

func (s *Server) downloadArtifact(w http.ResponseWriter, r *http.Request, u store.User) error {
	b, err := s.Store.ArtifactBlob(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"), r.PathValue("name"))
	if err != nil {
		return err
	}
	url, err := s.CAS.PresignDownload(r.Context(), b.Key, artifactFile(r.PathValue("name")))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, artifactDownload{URL: url, Digest: b.Digest, Size: b.Size, ExpiresAt: time.Now().Add(s.CAS.PresignExpiry()).UTC()})
	return nil
}

// ArtifactURL is a presigned download of an artifact, issued only after
// the store found u may read the run (the dashboard's download link).
func (s *Server) ArtifactURL(ctx context.Context, u store.User, runID, jobID, name string) (string, error) {
	b, err := s.Store.ArtifactBlob(ctx, u, runID, jobID, name)
	if err != nil {
		return "", err
	}
	return s.CAS.PresignDownload(ctx, b.Key, artifactFile(name))
}

// artifactFile names an artifact's download: a snapshot, a tar stream
// compressed with zstd (docs/runners.md).
func artifactFile(name string) string { return name + ".tar.zst" }
