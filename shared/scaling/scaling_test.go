package scaling_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/scaling"
	"github.com/forgeci/forgeci/shared/scaling/fakeasg"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

type fixture struct {
	st     *store.Store
	fake   *fakeasg.ASG
	scaler *scaling.Scaler
	now    time.Time
}

// newFixture: a store with wake-up hints, the fake Auto Scaling service
// reached through the SDK's endpoint override, and one group of up to 3
// ephemeral runners named "ec2" labelled linux.
func newFixture(t *testing.T) *fixture { return newFixtureWait(t, 1) }

// newFixtureWait is newFixture with the group's wait_seconds.
func newFixtureWait(t *testing.T, wait int) *fixture {
	t.Helper()
	st := pgtest.NewStore(t, store.Limits{})
	b := wake.New(castest.New(t), time.Second)
	b.SetTiming(1500*time.Millisecond, 400*time.Millisecond, 500*time.Millisecond)
	st.SetBoard(b)
	pgtest.Project(t, st, "p")
	fake := fakeasg.New(t)
	fake.AddGroup("runners", 0, 3, 0)
	t.Setenv("AWS_ENDPOINT_URL_AUTO_SCALING", fake.Server.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")
	asg, err := scaling.NewAutoScaling()
	if err != nil {
		t.Fatal(err)
	}
	groups, err := scaling.ParseGroups(fmt.Sprintf(`[{"asg": "runners", "labels": ["linux"], "runner": "ec2", "max": 3,
		"wait_seconds": %d, "idle_seconds": 600}]`, wait))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, fake: fake, now: time.Now()}
	f.scaler = &scaling.Scaler{Store: st, ASG: asg, Groups: groups, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return f.now }}
	return f
}

func (f *fixture) run(t *testing.T) {
	t.Helper()
	if err := f.scaler.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) queue(t *testing.T, labels ...string) {
	t.Helper()
	if _, err := f.st.CreateRun(context.Background(), store.NewRun{Project: "p", Jobs: []store.NewJob{{Name: "j",
		Labels: labels, Spec: domain.JobSpec{Steps: []domain.Step{{Run: "true"}}}}}}); err != nil {
		t.Fatal(err)
	}
}

func TestScaleOutAfterWaitThenToZero(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	if len(f.fake.Changes()) != 0 {
		t.Fatal("an empty queue scaled the group")
	}
	f.queue(t, "linux")
	f.queue(t, "linux")
	f.queue(t, "gpu") // not the group's
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("scaled out to %d before the jobs waited wait_seconds", d)
	}
	time.Sleep(1100 * time.Millisecond)
	f.fake.DropResponses("SetDesiredCapacity", 1) // applied, answer lost: the SDK retries
	f.run(t)
	if d := f.fake.Desired("runners"); d != 2 {
		t.Fatalf("desired %d after two linux jobs waited, want 2 (the gpu job is not the group's)", d)
	}
	// The jobs run elsewhere and end; the group is idle, but not yet for
	// idle_seconds since its runner's last job.
	if _, err := f.st.Pool().Exec(context.Background(), `UPDATE jobs SET state = 'PASSED', finished_at = now() WHERE 'linux' = ANY (labels)`); err != nil {
		t.Fatal(err)
	}
	f.run(t) // never ran a job itself: idle since forever
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("desired %d with nothing queued or running and the runner idle, want 0", d)
	}
}

// At zero, with no job queued since the last look, the scaler reads the
// queue hint and the groups, and asks the database nothing.
func TestIdleScalerSkipsTheDatabase(t *testing.T) {
	f := newFixture(t)
	f.run(t) // first look: writes the hint the next compare with
	time.Sleep(1500*time.Millisecond + wake.Skew)
	f.run(t)
	f.st.Pool().Reset()
	stat := f.st.Pool().Stat()
	f.run(t)
	f.run(t)
	if after := f.st.Pool().Stat(); after.NewConnsCount() != stat.NewConnsCount() || after.AcquireCount() != stat.AcquireCount() {
		t.Fatalf("idle scaler invocations used the database: %d connections, %d acquires", after.NewConnsCount()-stat.NewConnsCount(),
			after.AcquireCount()-stat.AcquireCount())
	}
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("a job queued after the quiet did not scale out: desired %d", d)
	}
}

// A job queued, seen by a look after the hint settled but before it had
// waited wait_seconds, still scales the group out once it has: the
// scaler keeps asking while a job it could take is queued.
func TestWaitLongerThanTheHintSettles(t *testing.T) {
	f := newFixtureWait(t, 3)
	f.run(t)
	f.queue(t, "linux")
	time.Sleep(1500*time.Millisecond + wake.Skew + 100*time.Millisecond) // the hint settles
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("scaled out to %d before the job waited wait_seconds", d)
	}
	time.Sleep(600 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("desired %d after the job waited wait_seconds, want 1", d)
	}
}

func TestParseGroupsRefusesBadConfig(t *testing.T) {
	for _, raw := range []string{`nope`, `[{"asg": ""}]`, `[{"asg": "a", "labels": ["x"], "runner": "r", "max": 0, "idle_seconds": 600}]`,
		`[{"asg": "a", "labels": ["x"], "runner": "r", "max": 2, "idle_seconds": 5}]`,
		`[{"asg": "a", "labels": ["bad label"], "runner": "r", "max": 2, "idle_seconds": 600}]`,
		`[{"asg": "a", "labels": ["x"], "runner": "r", "max": 2, "idle_seconds": 600}, {"asg": "a", "labels": ["x"], "runner": "r", "max": 2, "idle_seconds": 600}]`,
		`[{"asg": "a", "labels": ["x"], "runner": "r", "max": 2, "idle_seconds": 600}, {"asg": "b", "labels": ["x"], "runner": "r", "max": 2, "idle_seconds": 600}]`} {
		if _, err := scaling.ParseGroups(raw); err == nil {
			t.Errorf("accepted %s", raw)
		}
	}
}

// A group whose runner ended a job stays out for idle_seconds after it.
func TestStaysOutForTheIdlePeriod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	reg, _, err := f.st.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := f.st.RegisterRunner(ctx, reg, "ec2", []string{"linux"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.st.AuthenticateRunner(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("desired %d, want 1", d)
	}
	c, err := f.st.Claim(ctx, r, nil, 0)
	if err != nil || c == nil {
		t.Fatalf("claim %v %v", c, err)
	}
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("desired %d while its job runs, want 1", d)
	}
	if _, err := f.st.Complete(ctx, r.ID, c.Lease.JobID, c.Lease, domain.OutcomePassed, 0); err != nil {
		t.Fatal(err)
	}
	f.fake.SetDesiredOutside("runners", 1) // (the instance would end itself; say it has not yet)
	f.now = time.Now().Add(5 * time.Minute)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("desired %d five minutes after its last job (idle period ten), want 1", d)
	}
	f.now = time.Now().Add(11 * time.Minute)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("desired %d eleven minutes after its last job, want 0", d)
	}
}

// TestFeaturesTheRunnerLacksScaleOne: queued jobs that need a runner
// feature the group's runner did not declare at its last poll (its image
// runs an older runner) bring one instance, not one each: it boots, polls,
// and takes them if the image was upgraded since (counting none would
// never learn of the upgrade, since only a booted instance polls). Once
// the runner polled after they were queued, they bring none for an hour.
// Jobs the runner can take count one each.
func TestFeaturesTheRunnerLacksScaleOne(t *testing.T) {
	for _, c := range []struct {
		declared, polled string // polled: the runner's last poll, SQL
		want             int
	}{
		{"{}", "NULL", 1},                               // one probe for both
		{"{}", "now()", 0},                              // it polled after they were queued
		{"{}", "now() - interval '2 hours'", 1},         // an hour on, probe again
		{"{" + domain.FeatureReports + "}", "now()", 2}, // it has them: one each
	} {
		f := newFixtureWait(t, 0)
		f.unfit(t, 2, c.declared, c.polled)
		f.run(t)
		if d := f.fake.Desired("runners"); d != c.want {
			t.Errorf("runner features %s, last poll %s, two jobs needing %s: desired %d, want %d",
				c.declared, c.polled, domain.FeatureReports, d, c.want)
		}
	}
}

// TestGroupsThatCannotTakeTheChange: a group the configuration names but
// Auto Scaling does not have (deleted, misnamed) is skipped and the
// others scale; a group whose own maximum is below the configured one is
// scaled to its own (Auto Scaling refuses a change past it, whole).
func TestGroupsThatCannotTakeTheChange(t *testing.T) {
	f := newFixture(t)
	f.fake.AddGroup("small", 0, 1, 0)
	groups, err := scaling.ParseGroups(`[{"asg": "gone", "labels": ["linux"], "runner": "gone", "max": 3, "wait_seconds": 1, "idle_seconds": 600},
		{"asg": "small", "labels": ["linux"], "runner": "ec2", "max": 3, "wait_seconds": 1, "idle_seconds": 600}]`)
	if err != nil {
		t.Fatal(err)
	}
	f.scaler.Groups = groups
	for range 3 {
		f.queue(t, "linux")
	}
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("small"); d != 1 {
		t.Fatalf("desired %d of a group of at most 1 with three jobs waiting, beside a missing group; want 1", d)
	}
}

// TestOverlappingGroupsShareTheQueue: a job that two groups' labels cover
// brings one instance, of the first group in the configured order that
// has room; past its maximum the next group takes the rest. A group whose
// instances stalled takes only what no other group has room for.
func TestOverlappingGroupsShareTheQueue(t *testing.T) {
	f := newFixture(t)
	f.overlapping(t, 1, 1)
	for range 4 {
		f.queue(t, "linux")
	}
	f.queue(t, "big")
	time.Sleep(1100 * time.Millisecond)
	for range 2 { // and stays so: the jobs queued while instances boot are not counted again
		f.run(t)
		if r, b := f.fake.Desired("runners"), f.fake.Desired("big"); r != 3 || b != 2 {
			t.Fatalf("four linux jobs and one big: desired runners %d, big %d; want 3 (its maximum) and 2", r, b)
		}
	}
}

func TestStalledGroupLeavesItsJobsToTheNext(t *testing.T) {
	f := newFixture(t)
	f.overlapping(t, 1, 1)
	f.queue(t, "linux")
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	f.wantDesired(t, 2, 0, "two linux jobs")
	f.fake.SetDesiredOutside("runners", 0) // its instances never polled
	f.now = f.now.Add(11 * time.Minute)
	f.run(t)
	f.wantDesired(t, 0, 2, "the first group stalled")
}

// TestJobsGoToTheGroupWithTheShortestWait: jobs both groups cover go to
// the group that goes out for them first, the one with the shorter wait,
// though it is listed second, and stay with it as they wait on: a job
// queued later is not counted by the first group once it has waited that
// group's wait too (two instances for one job).
func TestJobsGoToTheGroupWithTheShortestWait(t *testing.T) {
	f := newFixture(t)
	f.overlapping(t, 2, 1)
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.queue(t, "linux")
	f.run(t)
	f.wantDesired(t, 0, 2, "one job waited 1 s of the first group's 2 and the second's 1, another just queued")
	time.Sleep(2100 * time.Millisecond) // both have waited both groups' waits
	f.run(t)
	f.wantDesired(t, 0, 2, "both jobs waited both waits")
}

// TestJobsGoFirstToInstancesOutAlready: jobs both groups cover, for
// which the group with the longer wait has instances out already
// (booting), bring no instance of the other.
func TestJobsGoFirstToInstancesOutAlready(t *testing.T) {
	f := newFixture(t)
	f.overlapping(t, 1, 1)
	f.fake.SetDesiredOutside("big", 2)
	f.queue(t, "linux")
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	f.wantDesired(t, 0, 2, "two jobs, two instances of big booting")
}

// TestOverdueJobsBringTheOtherGroups: a job the group with the shortest
// wait counted, still queued ten minutes after that wait (its instances
// did not take it: a spot type without capacity), brings an instance of
// the group with the longer wait too.
func TestOverdueJobsBringTheOtherGroups(t *testing.T) {
	f := newFixture(t)
	f.overlapping(t, 1, 120)
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	f.wantDesired(t, 1, 0, "a job waited the first group's wait")
	if _, err := f.st.Pool().Exec(context.Background(), `UPDATE jobs SET queued_at = now() - interval '15 minutes'`); err != nil {
		t.Fatal(err)
	}
	f.run(t)
	f.wantDesired(t, 1, 1, "the job still queued 15 minutes on")
}

// wantDesired fails the test unless the groups runners and big are at
// these desired capacities (after what).
func (f *fixture) wantDesired(t *testing.T, runners, big int, what string) {
	t.Helper()
	if r, b := f.fake.Desired("runners"), f.fake.Desired("big"); r != runners || b != big {
		t.Fatalf("%s: desired runners %d, big %d; want %d and %d", what, r, b, runners, big)
	}
}

// overlapping adds a second group, big, of up to 5 runners labelled
// linux and big, after the fixture's (up to 3, linux), with these waits.
func (f *fixture) overlapping(t *testing.T, waitRunners, waitBig int) {
	t.Helper()
	f.fake.AddGroup("big", 0, 5, 0)
	groups, err := scaling.ParseGroups(fmt.Sprintf(`[
		{"asg": "runners", "labels": ["linux"], "runner": "ec2", "max": 3, "wait_seconds": %d, "idle_seconds": 600},
		{"asg": "big", "labels": ["linux", "big"], "runner": "ec2-big", "max": 5, "wait_seconds": %d, "idle_seconds": 600}]`,
		waitRunners, waitBig))
	if err != nil {
		t.Fatal(err)
	}
	f.scaler.Groups = groups
}

// TestInstancesThatNeverPollStopTheScaleOut: instances of a scale-out
// that end without ever polling (an expired registration token) leave
// the group; the scaler does not raise it again while they have not
// polled, and an hour after the last scale-out tries one instance.
func TestInstancesThatNeverPollStopTheScaleOut(t *testing.T) {
	f := newFixture(t)
	f.queue(t, "linux")
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 2 {
		t.Fatalf("desired %d after two jobs waited, want 2", d)
	}
	f.fake.SetDesiredOutside("runners", 0) // both instances failed to register and left
	f.now = f.now.Add(5 * time.Minute)     // still booting, as far as the scaler knows
	f.run(t)
	if d := f.fake.Desired("runners"); d != 2 {
		t.Fatalf("desired %d within the boot allowance, want 2 again", d)
	}
	f.fake.SetDesiredOutside("runners", 0)
	f.now = f.now.Add(11 * time.Minute)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("desired %d after a scale-out whose instances never polled, want 0", d)
	}
	f.now = f.now.Add(time.Hour)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("desired %d an hour later, want one instance tried", d)
	}
}

// TestFeaturesProbeComesBack: jobs needing features the runner lacks,
// its probe instance having polled and found them not its own, are
// probed again an hour on though nothing new was queued; in between the
// scaler asks the database nothing (it would never pause while such a
// job waits).
func TestFeaturesProbeComesBack(t *testing.T) {
	f := newFixtureWait(t, 0)
	ctx := context.Background()
	f.unfit(t, 1, "{}", "now()")
	time.Sleep(1500*time.Millisecond + wake.Skew + 100*time.Millisecond) // the queue hint settles: a look may note it seen
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("desired %d right after the probe polled, want 0", d)
	}
	f.st.Pool().Reset()
	stat := f.st.Pool().Stat()
	f.now = f.now.Add(50 * time.Minute)
	f.run(t)
	if after := f.st.Pool().Stat(); after.AcquireCount() != stat.AcquireCount() {
		t.Fatalf("a look before the next probe was due used the database (%d acquires)", after.AcquireCount()-stat.AcquireCount())
	}
	if _, err := f.st.Pool().Exec(ctx, `UPDATE runners SET last_seen_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(12 * time.Minute)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 1 {
		t.Fatalf("desired %d an hour after the last probe, nothing new queued; want 1", d)
	}
}

// unfit registers the group's runner, declaring features declared (SQL
// array text) and last polled at polled (SQL), and queues n linux jobs,
// a minute ago, that need a feature it may lack.
func (f *fixture) unfit(t *testing.T, n int, declared, polled string) {
	t.Helper()
	ctx := context.Background()
	reg, _, err := f.st.CreateRegistrationToken(ctx, time.Minute, "", store.Scope{Untrusted: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.st.RegisterRunner(ctx, reg, "ec2", []string{"linux"}); err != nil {
		t.Fatal(err)
	}
	for range n {
		f.queue(t, "linux")
	}
	if _, err := f.st.Pool().Exec(ctx, `UPDATE jobs SET features = $1::text[], queued_at = now() - interval '1 minute'`,
		[]string{domain.FeatureReports}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Pool().Exec(ctx, `UPDATE runners SET features = $1::text[], last_seen_at = `+polled, declared); err != nil {
		t.Fatal(err)
	}
}
