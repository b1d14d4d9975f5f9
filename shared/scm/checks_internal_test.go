package scm

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

// TestPlainOutputAfterRefusal: an output GitHub refuses as invalid (422)
// is sent again with only its title and a summary saying where the rest
// is; another error is not retried here; and clip cuts on a character.
func TestPlainOutputAfterRefusal(t *testing.T) {
	out := &github.CheckRunOutput{Title: github.String("Failed"), Summary: github.String("long"),
		Annotations: []*github.CheckRunAnnotation{{Path: github.String("x")}}}
	var sent []*github.CheckRunOutput
	refuse := func(status int) func(*github.CheckRunOutput) error {
		return func(o *github.CheckRunOutput) error {
			sent = append(sent, o)
			if len(sent) == 1 {
				return &github.ErrorResponse{Response: &http.Response{StatusCode: status}}
			}
			return nil
		}
	}
	if err := withPlainOutput(out, refuse(http.StatusUnprocessableEntity)); err != nil || len(sent) != 2 ||
		sent[1].GetTitle() != "Failed" || len(sent[1].Annotations) != 0 || !strings.Contains(sent[1].GetSummary(), "ForgeCI") {
		t.Fatalf("after a 422: %v, sent %d", err, len(sent))
	}
	sent = nil
	var ge *github.ErrorResponse
	if err := withPlainOutput(out, refuse(http.StatusBadGateway)); !errors.As(err, &ge) || len(sent) != 1 {
		t.Fatalf("after a 502: %v, sent %d", err, len(sent))
	}
	if got := clip(strings.Repeat("é", 10), 7); got != "éé…" {
		t.Fatalf("clip: %q", got)
	}
}

// A check run GitHub keeps refusing as gone waits the worker's backoff
// for its first checkPatience refusals in a row, then checkLongWait; one
// that fails otherwise (an outage) waits the backoff however long it
// lasts.
func TestCheckWaitGrowsLong(t *testing.T) {
	w := &Worker{Backoff: ExponentialBackoff(10*time.Second, 10*time.Minute)}
	if got := w.checkWait(1, 1); got != 10*time.Second {
		t.Errorf("after the first refusal: %v", got)
	}
	if got := w.checkWait(checkPatience-1, checkPatience-1); got != 10*time.Minute {
		t.Errorf("after %d refusals: %v", checkPatience-1, got)
	}
	if got := w.checkWait(checkPatience, checkPatience); got != checkLongWait {
		t.Errorf("after %d refusals: %v", checkPatience, got)
	}
	if got := w.checkWait(3*checkPatience, 1); got != 10*time.Minute {
		t.Errorf("a first refusal after %d failures of an outage: %v", 3*checkPatience, got)
	}
}

// Which refusals last: rate limits and 5xx do not.
func TestGone(t *testing.T) {
	status := func(code int) error {
		return fmt.Errorf("push: %w", &github.ErrorResponse{Response: &http.Response{StatusCode: code}})
	}
	for code, want := range map[int]bool{401: true, 403: true, 404: true, 410: true, 422: true, 500: false, 502: false} {
		if got := gone(status(code)); got != want {
			t.Errorf("%d: gone %v", code, got)
		}
	}
	if gone(&github.RateLimitError{}) || gone(&github.AbuseRateLimitError{}) || gone(errors.New("connection reset")) {
		t.Error("a rate limit or a network error is gone")
	}
}
