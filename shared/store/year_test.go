package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/forgeci/forgeci/shared/store"
)

// TestYearOfUse: a year of daily runs, each job logging, saving an
// artifact and, weekly, a new cache, with the collector after each day,
// leaves storage flat once retention (90 days) has passed: rows, blobs and
// objects at the end are what they were at day 120, give or take a week's
// worth. Time passes by moving every timestamp back a day each day.
func TestYearOfUse(t *testing.T) {
	if testing.Short() {
		t.Skip("a year takes a while")
	}
	e := newGCEnv(t)
	ctx := context.Background()
	type sample struct{ runs, jobs, chunks, attempts, blobs, caches, objects int }
	take := func() sample {
		objects, err := e.cas.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return sample{e.count(`SELECT count(*) FROM runs`), e.count(`SELECT count(*) FROM jobs`),
			e.count(`SELECT count(*) FROM log_chunks`), e.count(`SELECT count(*) FROM job_attempts`),
			e.count(`SELECT count(*) FROM blobs`), e.count(`SELECT count(*) FROM caches`), len(objects)}
	}
	var at120 sample
	for day := 1; day <= 365; day++ {
		for _, q := range []string{
			`UPDATE runs SET created_at = created_at - interval '1 day', started_at = started_at - interval '1 day',
			        finished_at = finished_at - interval '1 day'`,
			`UPDATE job_attempts SET started_at = started_at - interval '1 day', ended_at = ended_at - interval '1 day'`,
			`UPDATE caches SET created_at = created_at - interval '1 day', last_used_at = last_used_at - interval '1 day'`,
			`UPDATE blobs SET touched_at = touched_at - interval '1 day'`,
			`UPDATE uploads SET created_at = created_at - interval '1 day'`,
		} {
			e.exec(q)
		}
		for j := range 2 {
			e.job(fmt.Sprintf("d%d-j%d", day, j), []byte(fmt.Sprintf("artifact of day %d job %d", day, j)),
				[]byte(fmt.Sprintf("cache of week %d", day/7)))
		}
		// A run on the main branch restores the week's cache, as builds do.
		e.exec(`UPDATE caches SET last_used_at = now() WHERE key LIKE $1`, fmt.Sprintf("d%d-%%", day-day%7))
		if _, err := e.s.CollectGarbage(ctx, store.GCOptions{}); err != nil {
			t.Fatalf("day %d: %v", day, err)
		}
		if day == 120 {
			at120 = take()
		}
	}
	end := take()
	t.Logf("day 120: %+v; day 365: %+v", at120, end)
	for name, pair := range map[string][2]int{"runs": {at120.runs, end.runs}, "jobs": {at120.jobs, end.jobs},
		"log chunks": {at120.chunks, end.chunks}, "attempts": {at120.attempts, end.attempts},
		"blobs": {at120.blobs, end.blobs}, "caches": {at120.caches, end.caches}, "objects": {at120.objects, end.objects}} {
		if pair[1] > pair[0]+16 || pair[1] < pair[0]-16 || pair[1] == 0 {
			t.Errorf("%s: %d at day 120, %d at day 365: not flat", name, pair[0], pair[1])
		}
	}
	if end.runs > 2*91 {
		t.Errorf("%d runs kept with a 90-day retention and 2 runs a day", end.runs)
	}
}
