package chaos

import (
	mrand "math/rand/v2"
	"testing"
)

// TestPickerCoversEveryKind: from any random phase, every weighted kind
// turns up within each run of picks as long as the weights' total, in
// proportion over a long run, and a kind of weight 0 never does.
func TestPickerCoversEveryKind(t *testing.T) {
	kinds := []weighted{{"stop", 2}, {"stall", 1}, {"never", 0}}
	for seed := range uint64(200) {
		h := &Harness{rng: mrand.New(mrand.NewPCG(seed, seed+1))}
		pick := h.newPicker(kinds)
		var seq []string
		for range 300 {
			seq = append(seq, pick())
		}
		counts := map[string]int{}
		for i, k := range seq {
			counts[k]++
			if i >= 1 && k != "stop" && seq[i-1] != "stop" {
				t.Fatalf("seed %d: two picks in a row without a stop: %v", seed, seq[:i+1])
			}
		}
		if counts["never"] != 0 || counts["stop"] < 195 || counts["stop"] > 205 || counts["stall"] < 95 {
			t.Fatalf("seed %d: counts %v, want about 200 stops and 100 stalls", seed, counts)
		}
	}
}
