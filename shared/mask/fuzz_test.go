package mask

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// FuzzStream: for any secrets and text (up to 64 KiB), streaming the text
// cut anywhere gives exactly what masking it whole gives; no pattern is
// left in the output; and it takes under a second and allocations bounded
// by the sizes involved. Secrets are put into the text, in clear and
// encoded, at places the seed picks, so that matches are common.
func FuzzStream(f *testing.F) {
	f.Add("hunter2-pass", "line1\nline2", []byte("log: hunter2-pass\n"), uint64(1))
	f.Add("aaaa", "aaab", bytes.Repeat([]byte("a"), 300), uint64(2))
	f.Add("s3cr3t\r\nmore", "", []byte("x=s3cr3t\ny=more\n"), uint64(3))
	f.Fuzz(func(t *testing.T, s1, s2 string, text []byte, seed uint64) {
		// Replacement is made of '*': a secret containing it can be
		// spelt by Replacement and the bytes next to it, which shows
		// nothing of the secret but fails the oracle below.
		s1, s2 = strings.ReplaceAll(s1, "*", ""), strings.ReplaceAll(s2, "*", "")
		if len(s1) > 4096 || len(s2) > 4096 || len(text) > 64<<10 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		text = plant(rng, text, []string{s1, s2})
		if len(text) > 64<<10 {
			text = text[:64<<10]
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()

		s := New([]string{s1, s2})
		whole := s.Bytes(text)
		streamed := writeSplit(t, s, text, rng)

		elapsed := time.Since(start)
		runtime.ReadMemStats(&after)
		if elapsed > time.Second {
			t.Fatalf("%d bytes, secrets of %d and %d bytes: %v", len(text), len(s1), len(s2), elapsed)
		}
		// Patterns are at most ~16 forms per secret byte; nodes are 20
		// bytes; the text is copied a few times.
		budget := uint64(2<<20 + 64*len(text) + 1024*(len(s1)+len(s2)))
		if got := after.TotalAlloc - before.TotalAlloc; got > budget {
			t.Fatalf("allocated %d bytes (budget %d)", got, budget)
		}
		if !bytes.Equal(whole, streamed) {
			t.Fatalf("streamed output differs from the whole:\n%q\n%q", streamed, whole)
		}
		for _, v := range []string{s1, s2} {
			for _, form := range Forms(v) {
				for _, p := range pieces(form) {
					if bytes.Contains(whole, []byte(p)) {
						t.Fatalf("pattern %q left in %q", p, whole)
					}
				}
			}
		}
	})
}

// plant inserts the secrets, and some of their forms, into text.
func plant(rng *rand.Rand, text []byte, secrets []string) []byte {
	for _, v := range secrets {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte("x" + v))} {
			at := rng.IntN(len(text) + 1)
			text = append(text[:at:at], append([]byte(form), text[at:]...)...)
		}
	}
	return text
}
