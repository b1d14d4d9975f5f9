package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// TestLogIndex: the steps an attempt's appends reported come back in
// order with their sections, the first report of each start and end
// standing and names masked; the lines' marks come back at absolute
// offsets for the range asked; another project's member finds nothing.
func TestLogIndex(t *testing.T) {
	ctx := context.Background()
	s, _, _ := kmsStore(t)
	d := claimSecretJob(t, s)
	root, r, l := d.root, d.runner, d.claim.Lease
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	start := protocol.StepEvent{Index: 0, Name: "deploy with " + secret, LogOffset: 6, StartedAt: t0}
	appends := []store.LogAppend{
		{Offset: 0, Data: []byte("setup\n==> step 1/1\n"), Times: []protocol.LineTime{{0, t0.UnixMilli()}, {6, t0.UnixMilli() + 5}},
			Steps: []protocol.StepEvent{start}},
		{Offset: 19, Data: []byte("done\n"), Times: []protocol.LineTime{{0, t0.UnixMilli() + 2000}}},
	}
	end, fin, code := int64(24), t0.Add(2*time.Second), 0
	ended := start
	ended.EndOffset, ended.FinishedAt, ended.ExitCode, ended.Conclusion = &end, &fin, &code, "success"
	later := ended
	other := 9
	later.ExitCode, later.Name = &other, "renamed" // a second end report changes nothing
	appends = append(appends, store.LogAppend{Offset: 24, Steps: []protocol.StepEvent{ended}},
		store.LogAppend{Offset: 24, Steps: []protocol.StepEvent{later}})
	for _, a := range appends {
		if _, err := s.AppendLogWith(ctx, r.ID, l.JobID, l, a); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := s.LogIndexAs(ctx, root, l.RunID, l.JobID, 0, true, 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Steps) != 1 || idx.LogEnd != 24 {
		t.Fatalf("index %+v", idx)
	}
	st := idx.Steps[0]
	if got := fmt.Sprintf("%s [%d,%d) exit %d %s %.0fs", st.Name, st.LogOffset, *st.EndOffset, *st.ExitCode, st.Conclusion, st.Seconds); got != "deploy with *** [6,24) exit 0 success 2s" {
		t.Fatalf("step: %s", got)
	}
	// The first chunk overlaps [10, 100), so its marks come too.
	if got := fmt.Sprint(idx.Times); got != fmt.Sprint([]protocol.LineTime{{0, t0.UnixMilli()}, {6, t0.UnixMilli() + 5}, {19, t0.UnixMilli() + 2000}}) {
		t.Fatalf("times %v", got)
	}
	// Compacted once the attempt has ended, the log keeps its marks.
	if _, err := s.Complete(ctx, r.ID, l.JobID, l, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM log_chunks WHERE job_id = $1`, l.JobID); n != 1 {
		t.Fatalf("%d chunks after compaction", n)
	}
	again, err := s.LogIndexAs(ctx, root, l.RunID, l.JobID, 0, true, 0, 100)
	if err != nil || fmt.Sprint(again.Times) != fmt.Sprint(idx.Times) || again.JobState != domain.JobPassed || again.TimesTo != 24 {
		t.Fatalf("after compaction: %+v %v", again, err)
	}
	stranger, _, err := s.CreateUser(ctx, "stranger", store.RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LogIndexAs(ctx, stranger, l.RunID, l.JobID, 0, true, 0, 100); domain.ErrorCode(err) != domain.ENotFound {
		t.Fatalf("a stranger's read: %v", err)
	}
}
