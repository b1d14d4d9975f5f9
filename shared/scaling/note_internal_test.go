package scaling

import (
	"testing"
	"time"
)

// The scaler's note: a token alone (as older scalers wrote it), a token
// and a probe time, and a probe time it cannot read, which is due at once.
func TestScalerNote(t *testing.T) {
	at := time.Date(2026, 12, 6, 20, 30, 0, 5, time.UTC)
	if token, probeAt := parseScalerNote(scalerNoteOf("abc", at)); token != "abc" || !probeAt.Equal(at) {
		t.Errorf("round trip: %q %v", token, probeAt)
	}
	if token, probeAt := parseScalerNote("abc"); token != "abc" || !probeAt.IsZero() {
		t.Errorf("a token alone: %q %v", token, probeAt)
	}
	if token, probeAt := parseScalerNote("abc soon"); token != "abc" || probeAt.IsZero() || !probeAt.Before(time.Now()) {
		t.Errorf("an unreadable probe time: %q %v", token, probeAt)
	}
}
