package scaling_test

import (
	"context"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// A group whose runner was revoked (and not registered again) does not
// scale out: its instances would boot with the revoked token and fail,
// over and over, for as long as jobs wait.
func TestRevokedRunnerDoesNotScale(t *testing.T) {
	f := newFixture(t)
	if err := f.st.RevokeRunner(context.Background(), f.register(t, store.Scope{Untrusted: true})); err != nil {
		t.Fatal(err)
	}
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("desired %d with the group's runner revoked, want 0", d)
	}
}

// TestUntrustedOnlyGroupSkipsTrustedJobs: a group whose runner takes
// untrusted work only does not go out for a trusted job.
func TestUntrustedOnlyGroupSkipsTrustedJobs(t *testing.T) {
	f := newFixture(t)
	f.register(t, store.Scope{UntrustedOnly: true})
	f.queue(t, "linux")
	time.Sleep(1100 * time.Millisecond)
	f.run(t)
	if d := f.fake.Desired("runners"); d != 0 {
		t.Fatalf("desired %d for a trusted job, the group's runner taking untrusted work only; want 0", d)
	}
}

// register registers the group's runner, ec2, with scope; it returns its
// ID.
func (f *fixture) register(t *testing.T, scope store.Scope) string {
	t.Helper()
	reg, _, err := f.st.CreateRegistrationToken(context.Background(), time.Minute, "", scope)
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := f.st.RegisterRunner(context.Background(), reg, "ec2", []string{"linux"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}
