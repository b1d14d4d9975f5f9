package api

import (
	"context"
	"net/http"

	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// report records the summary of a job's test reports, under the lease.
func (s *Server) report(ctx context.Context, l held, req *protocol.ReportRequest) (*protocol.ReportResponse, error) {
	if err := s.Store.SetReport(ctx, l.Runner.ID, l.JobID, l.Lease, req.Summary); err != nil {
		return nil, err
	}
	return &protocol.ReportResponse{}, nil
}

// reportView is an attempt's test report summary as the API shows it.
type reportView struct {
	Generation int `json:"generation"`
	protocol.TestSummary
}

// getReport answers the test report summary of the current or
// ?generation= attempt of a job.
func (s *Server) getReport(w http.ResponseWriter, r *http.Request, u store.User) error {
	gen, err := generationOf(r.URL.Query())
	if err != nil {
		return err
	}
	sum, g, err := s.Store.ReportAs(r.Context(), u, r.PathValue("run_id"), r.PathValue("job_id"), gen)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reportView{Generation: g, TestSummary: sum})
	return nil
}
