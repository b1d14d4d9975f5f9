package gateway

import (
	"strings"
	"testing"
	"time"
)

// TestLoadPolls: the defaults, a value set, and a value out of range or
// not a number refused with the variable's name.
func TestLoadPolls(t *testing.T) {
	p, err := LoadPolls()
	if err != nil || p.Busy != 2*time.Second || p.Idle != 20*time.Second {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
	t.Setenv("FORGECI_IDLE_POLL_SECONDS", "45")
	if p, err = LoadPolls(); err != nil || p.Idle != 45*time.Second || p.Busy != 2*time.Second {
		t.Fatalf("idle 45: %+v, %v", p, err)
	}
	for _, bad := range []string{"0", "301", "ten", "-1"} {
		t.Setenv("FORGECI_IDLE_POLL_SECONDS", bad)
		if _, err := LoadPolls(); err == nil || !strings.Contains(err.Error(), "FORGECI_IDLE_POLL_SECONDS") {
			t.Errorf("idle %q: %v, want a refusal naming the variable", bad, err)
		}
	}
	t.Setenv("FORGECI_IDLE_POLL_SECONDS", "")
	t.Setenv("FORGECI_BUSY_POLL_SECONDS", "61")
	if _, err := LoadPolls(); err == nil || !strings.Contains(err.Error(), "FORGECI_BUSY_POLL_SECONDS") {
		t.Errorf("busy 61: %v, want a refusal naming the variable", err)
	}
}
