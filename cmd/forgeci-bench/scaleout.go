package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/scaling"
	"github.com/forgeci/forgeci/shared/scaling/fakeasg"
	"github.com/forgeci/forgeci/shared/store"
)

// scaleWait is the bench group's wait_seconds; scalePeriod how often its
// scaler is invoked (every minute in AWS; shortened so that rounds are
// quick, the ratio to the threshold holds the same shape).
const (
	scaleWait   = 2 * time.Second
	scalePeriod = time.Second
)

// benchScaleOut: time from a job being queued to the scaler raising its
// group's desired capacity on the fake Auto Scaling endpoint (through the
// SDK), the scaler invoked every scalePeriod, beside the group's
// wait_seconds: the earliest the decision may come. The goal allows one
// period on top, and some.
func benchScaleOut(ctx context.Context, admin string, rounds int) ([]row, error) {
	stack, dropDB, err := benchStack(ctx, admin, "bench_scale", "bench-scale", 4)
	if err != nil {
		return nil, err
	}
	defer dropDB()
	defer stack.Close()
	st := stack.Store
	if _, err := st.CreateProject(ctx, "bench", "main"); err != nil {
		return nil, err
	}
	fake := fakeasg.Start()
	defer fake.Server.Close()
	fake.AddGroup("runners", 0, 10, 0)
	for k, v := range map[string]string{"AWS_ENDPOINT_URL_AUTO_SCALING": fake.Server.URL, "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
		"AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"} {
		os.Setenv(k, v)
	}
	asg, err := scaling.NewAutoScaling()
	if err != nil {
		return nil, err
	}
	groups, err := scaling.ParseGroups(fmt.Sprintf(`[{"asg": "runners", "labels": ["linux"], "runner": "ec2", "max": 10,
		"wait_seconds": %d, "idle_seconds": 600}]`, int(scaleWait.Seconds())))
	if err != nil {
		return nil, err
	}
	sc := &scaling.Scaler{Store: st, ASG: asg, Groups: groups, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	failed := make(chan error, 1)
	go func() {
		t := time.NewTicker(scalePeriod)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
			}
			if err := sc.Run(loopCtx); err != nil && loopCtx.Err() == nil {
				select {
				case failed <- err:
				default:
				}
			}
		}
	}()
	var lat []float64
	for i := range 4 * max(1, rounds) {
		ms, err := scaleOutOnce(ctx, st, fake, i)
		if err != nil {
			return nil, err
		}
		select {
		case err := <-failed:
			return nil, fmt.Errorf("scaler: %w", err)
		default:
		}
		lat = append(lat, ms)
	}
	sort.Float64s(lat)
	return []row{{name: "scale-out decision (median)", figure: lat[len(lat)/2], baseline: float64(scaleWait.Milliseconds()),
		unit: "ms", baselineName: fmt.Sprintf("wait_seconds (scaler every %s)", scalePeriod), goal: 0.6}}, nil
}

// scaleOutOnce queues one job the group could take, waits for the scaler
// to raise the desired capacity, then ends the job and lowers it again.
func scaleOutOnce(ctx context.Context, st *store.Store, fake *fakeasg.ASG, i int) (float64, error) {
	// Queue at a different phase of the scaler's period each time.
	time.Sleep(time.Duration(i%4) * scalePeriod / 4)
	before := len(fake.Changes())
	run, err := st.CreateRun(ctx, store.NewRun{Project: "bench", Jobs: []store.NewJob{{Name: "j", Labels: []string{"linux"},
		Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}})
	if err != nil {
		return 0, err
	}
	queued := time.Now()
	deadline := queued.Add(scaleWait + 10*scalePeriod)
	for len(fake.Changes()) == before {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no scale-out %s after a job was queued", time.Since(queued))
		}
		time.Sleep(5 * time.Millisecond)
	}
	at := fake.Changes()[before].At
	if _, err := st.Pool().Exec(ctx, `UPDATE jobs SET state = 'CANCELED', finished_at = now() WHERE run_id = $1`, run.ID); err != nil {
		return 0, err
	}
	fake.SetDesiredOutside("runners", 0)
	return float64(at.Sub(queued).Microseconds()) / 1000, nil
}
