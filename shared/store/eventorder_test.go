package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestConcurrencyEventOrder: in a concurrency group the run of the later
// event wins, whatever order the runs are made in. A push whose delivery
// was retried after a later push's made its run (the branch's head) comes
// too late: it is superseded at once and cancels nothing.
func TestConcurrencyEventOrder(t *testing.T) {
	s := pgtest.NewStore(t, store.Limits{})
	pgtest.Project(t, s, "p")
	file := "concurrency: {group: deploy, cancel-in-progress: true}\njobs:\n  a: {steps: [{run: x}]}\n"
	older, newer := time.Now().Add(-time.Minute), time.Now().Add(-time.Second)
	push := func(at time.Time) store.Run {
		return pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main", Trigger: "github:push refs/heads/main",
			EventAt: at}, file)
	}
	head := push(newer)
	late := push(older)
	if got := runState(t, s, late.ID); got.State != domain.RunCanceled {
		t.Fatalf("the older push's late run: %s", got.State)
	}
	if why := reasons(t, s, late.ID)["a"]; why != fmt.Sprintf("superseded by #%d, of a later event", head.Number) {
		t.Fatalf("the older push's job: %q", why)
	}
	if got := runState(t, s, head.ID); got.State == domain.RunCanceled || got.ConcurrencyWaiting {
		t.Fatalf("the head's run: %s, waiting %v", got.State, got.ConcurrencyWaiting)
	}
	// In order, the later one cancels the earlier, as before; a run made
	// for no event (a manual one) counts as of when it is made.
	next := push(time.Now())
	if got := runState(t, s, head.ID); got.State != domain.RunCanceled {
		t.Fatalf("the earlier run after a later push: %s", got.State)
	}
	manual := pipelineRun(t, s, store.NewRun{Project: "p", GitRef: "refs/heads/main"}, file)
	if got := runState(t, s, next.ID); got.State != domain.RunCanceled {
		t.Fatalf("the push's run after a manual run: %s", got.State)
	}
	if got := runState(t, s, manual.ID); got.State == domain.RunCanceled {
		t.Fatalf("the manual run: %s", got.State)
	}
}
