package mask

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSwitchMidStream: an old secret written across the switch and a new
// one written after it are both masked.
func TestSwitchMidStream(t *testing.T) {
	var out bytes.Buffer
	w := New([]string{"old-secret-value"}).NewStream(&out)
	_, _ = w.Write([]byte("before old-sec"))
	w.Switch(New([]string{"old-secret-value", "new-token-value"}))
	_, _ = w.Write([]byte("ret-value and new-token-value after\n"))
	_ = w.Close()
	if got := out.String(); got != "before *** and *** after\n" {
		t.Fatalf("%q", got)
	}
}

// FuzzSwitch: whatever the cuts and the switch point, as long as the new
// secret is written only after the switch, the output is what masking the
// whole text with both secrets gives; within a time and memory bound.
func FuzzSwitch(f *testing.F) {
	f.Add("hunter2-pass", "eyJhbGciOiJSUzI1NiJ9.payload.sig", []byte("a hunter2-pass b"), []byte("tok eyJhbGciOiJSUzI1NiJ9.payload.sig end"), uint64(1))
	f.Add("aaaa", "aaab", []byte("xaa"), []byte("aab aaab"), uint64(2))
	f.Fuzz(func(t *testing.T, old, fresh string, head, tail []byte, seed uint64) {
		old, fresh = strings.ReplaceAll(old, "*", ""), strings.ReplaceAll(fresh, "*", "")
		if len(old) > 1024 || len(fresh) > 1024 || len(head)+len(tail) > 32<<10 {
			return
		}
		both := New([]string{old, fresh})
		text := append(append([]byte(nil), head...), tail...)
		if fs := New([]string{fresh}); fs != nil {
			if _, spans := fs.ac.scan(0, text, 0, nil); len(spans) > 0 && spans[0].lo < int64(len(head)) {
				return // the new secret begins before the switch: it was not new
			}
		}
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		var out bytes.Buffer
		w := New([]string{old}).NewStream(&out)
		for _, part := range cuts(rng, head) {
			_, _ = w.Write(part)
		}
		w.Switch(both)
		for _, part := range cuts(rng, tail) {
			_, _ = w.Write(part)
		}
		_ = w.Close()
		runtime.ReadMemStats(&after)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("took %v", d)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(4<<20+64*(len(head)+len(tail))) {
			t.Fatalf("allocated %d bytes", got)
		}
		whole := both.Bytes(text)
		if both == nil {
			whole = text
		}
		if !bytes.Equal(out.Bytes(), whole) {
			t.Fatalf("switched stream:\n%q\nwhole:\n%q", out.Bytes(), whole)
		}
	})
}

// cuts splits b at random places.
func cuts(rng *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := 1 + rng.IntN(len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}
