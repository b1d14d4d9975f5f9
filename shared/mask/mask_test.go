package mask

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"
)

// reference masks text the slow, obvious way: mark every byte inside any
// occurrence of any pattern, join marks that overlap, write each run as
// one Replacement.
func reference(patterns []string, text []byte) []byte {
	var spans []span
	for i := range text {
		for _, p := range patterns {
			if bytes.HasPrefix(text[i:], []byte(p)) {
				spans = append(spans, span{int64(i), int64(i + len(p))})
			}
		}
	}
	// Sort by start, merge overlapping (not merely touching) spans.
	for i := 1; i < len(spans); i++ {
		for j := i; j > 0 && spans[j].lo < spans[j-1].lo; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	var merged []span
	for _, sp := range spans {
		if n := len(merged); n > 0 && merged[n-1].hi > sp.lo {
			merged[n-1].hi = max(merged[n-1].hi, sp.hi)
			continue
		}
		merged = append(merged, sp)
	}
	return render(nil, text, 0, 0, int64(len(text)), merged)
}

// randomCase makes patterns over a small alphabet (so that they overlap,
// nest and share prefixes) and a text full of them.
func randomCase(rng *rand.Rand) ([]string, []byte) {
	alpha := "abcd\n="
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(alpha[rng.IntN(len(alpha))])
		}
		return b.String()
	}
	var pats []string
	for range 1 + rng.IntN(6) {
		pats = append(pats, word(1+rng.IntN(12)))
	}
	var text []byte
	for range rng.IntN(40) {
		if rng.IntN(2) == 0 {
			p := pats[rng.IntN(len(pats))]
			text = append(text, p[:1+rng.IntN(len(p))]...) // whole or a prefix
		} else {
			text = append(text, word(rng.IntN(5))...)
		}
	}
	return pats, text
}

// writeSplit streams text through s cut at random places.
func writeSplit(t testing.TB, s *Set, text []byte, rng *rand.Rand) []byte {
	var out bytes.Buffer
	w := s.NewStream(&out)
	for rest := text; len(rest) > 0; {
		n := min(len(rest), rng.IntN(8))
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		if w.Held() >= max(s.Longest(), 1) {
			t.Fatalf("holds back %d bytes, longest pattern %d", w.Held(), s.Longest())
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestMatchesReference: one-shot, streamed at random cuts and read as
// random windows, the text masks exactly as the slow reference does.
func TestMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		pats, text := randomCase(rng)
		s := fromForms(pats)
		want := reference(pats, text)
		if got := s.Bytes(text); !bytes.Equal(got, want) {
			t.Fatalf("case %d: patterns %q text %q\nBytes  %q\nwant   %q", i, pats, text, got, want)
		}
		if got := writeSplit(t, s, text, rng); !bytes.Equal(got, want) {
			t.Fatalf("case %d: patterns %q text %q\nStream %q\nwant   %q", i, pats, text, got, want)
		}
		if got := windows(s, text, rng); !bytes.Equal(got, want) {
			t.Fatalf("case %d: patterns %q text %q\nWindow %q\nwant   %q", i, pats, text, got, want)
		}
	}
}

// windows reads text as consecutive windows of random sizes with
// Longest()-1 bytes of context, as the control plane reads stored logs;
// while the text is "still being written" (a random prefix of it is
// stored) it holds back, and the reader continues where it was told.
func windows(s *Set, text []byte, rng *rand.Rand) []byte {
	ctx := max(s.Longest()-1, 0)
	stored := rng.IntN(len(text) + 1)
	var out []byte
	for off := 0; off < len(text); {
		final := stored == len(text)
		hi := min(off+1+rng.IntN(10), stored)
		lo := max(off-ctx, 0)
		buf := text[lo:min(hi+ctx, stored)]
		got, end := s.Window(buf, off-lo, hi-lo, final)
		out = append(out, got...)
		if lo+end == off { // nothing more to show yet: more is written
			stored = min(len(text), stored+1+rng.IntN(10))
		}
		off = lo + end
	}
	return out
}

func TestForms(t *testing.T) {
	v := "line-one\r\nab\nline+three/?&="
	forms := Forms(v)
	has := func(f string) bool {
		for _, g := range forms {
			if g == f {
				return true
			}
		}
		return false
	}
	for _, want := range []string{v, "line-one", "line+three/?&=", url.QueryEscape(v), url.PathEscape(v),
		base64.StdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v))} {
		if !has(want) {
			t.Errorf("no form %q in %q", want, forms)
		}
	}
	for _, f := range forms {
		if len(f) < MinLen {
			t.Errorf("form %q is under %d bytes", f, MinLen)
		}
	}
	if Forms("abc") != nil || New([]string{"abc", ""}) != nil {
		t.Error("values under MinLen must give nothing")
	}
}

// TestBase64Alignments: the base64 of a secret is masked inside longer
// base64 text, at each of the three byte alignments, in both alphabets.
func TestBase64Alignments(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	secret := "s3cr3t-\xff\xfe-value"
	s := New([]string{secret})
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		for k := range 6 {
			pre, post := make([]byte, k), make([]byte, rng.IntN(7))
			for i := range pre {
				pre[i] = byte(rng.Uint32())
			}
			text := enc.EncodeToString(append(append(pre, secret...), post...))
			got := s.String("data: " + text + "\n")
			if !strings.Contains(got, Replacement) || strings.Contains(got, inner(enc, secret, k%3)) {
				t.Errorf("prefix %d in %q: %q", k, text, got)
			}
		}
	}
}

// TestLongSecret: a form over MaxPattern is matched as pieces, and a
// whole occurrence still shows as one Replacement.
func TestLongSecret(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 70) + "end"
	s := New([]string{long})
	if s.Longest() > MaxPattern {
		t.Fatalf("longest pattern %d", s.Longest())
	}
	if got := s.String("a " + long + " b"); got != "a *** b" {
		t.Fatalf("got %q", got)
	}
	if got := s.String(long[100:500]); strings.Contains(got, long[200:300]) {
		t.Fatalf("part of a long secret shown: %q", got)
	}
}

func TestNilSet(t *testing.T) {
	var s *Set
	var out bytes.Buffer
	w := s.NewStream(&out)
	_, _ = w.Write([]byte("abcd"))
	if out.String() != "abcd" || s.String("abcd") != "abcd" || s.Longest() != 0 {
		t.Fatal("a nil set must pass everything through at once")
	}
}

// TestJSONAndHex: a secret printed by a program as JSON (Go's encoding/json
// escapes &, < and >; other encoders do not) or as hex is masked.
func TestJSONAndHex(t *testing.T) {
	secret := `p&ss<w>rd"\x`
	set := New([]string{secret})
	goJSON, _ := json.Marshal(map[string]string{"token": secret})
	var plain strings.Builder
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"token": secret})
	for _, out := range []string{string(goJSON), plain.String(), "key=" + hex.EncodeToString([]byte(secret)),
		"KEY=" + strings.ToUpper(hex.EncodeToString([]byte(secret)))} {
		got := set.String(out)
		if !strings.Contains(got, "***") || strings.Contains(got, "ss<w") || strings.Contains(got, `ss\u003cw`) || strings.Contains(got, "70267373") || strings.Contains(got, "70267373") {
			t.Errorf("%s shown as %s", out, got)
		}
	}
}

// TestWrappedBase64: a secret's base64 as `base64` (lines of 76) and
// `openssl base64` (64) print it, LF or CRLF, is masked in every line:
// before, a secret of more than 57 bytes was shown wrapped, in clear.
func TestWrappedBase64(t *testing.T) {
	secret := strings.Repeat("p4ss-w0rd-", 9) + "end" // 93 bytes
	s := New([]string{secret})
	for _, w := range []int{64, 76} {
		for _, nl := range []string{"\n", "\r\n"} {
			for _, input := range []string{secret, secret + "\n"} { // echo adds one
				enc := base64.StdEncoding.EncodeToString([]byte(input))
				var lines []string
				for lo := 0; lo < len(enc); lo += w {
					lines = append(lines, enc[lo:min(lo+w, len(enc))])
				}
				got := s.String("$ base64 key\n" + strings.Join(lines, nl) + nl + "$ done\n")
				for _, l := range lines {
					if len(l) > 8 && strings.Contains(got, l[:len(l)-4]) {
						t.Errorf("width %d %q, input %q: line %q shown in %q", w, nl, input[len(input)-3:], l, got)
					}
				}
				if !strings.HasPrefix(got, "$ base64 key\n***") || !strings.HasSuffix(got, "$ done\n") {
					t.Errorf("width %d %q: %q", w, nl, got)
				}
			}
		}
	}
}

// TestSharedPrefixesScanFast: values made to share a prefix and differ
// in the next byte (a step's ::add-mask:: values can be) do not slow the
// scan of text that keeps meeting that prefix: a node with many children
// looks them up in a table, not a list (150 times slower before).
func TestSharedPrefixesScanFast(t *testing.T) {
	var crafted, plain []string
	for i := range 250 {
		crafted = append(crafted, fmt.Sprintf("prefix-%c%c-tail", rune(i%250+1), rune('a'+i%26)))
		plain = append(plain, fmt.Sprintf("value-%04d-unrelated", i))
	}
	text := []byte(strings.Repeat("prefix-\xffq ", 1<<16))
	scan := func(values []string) time.Duration {
		s := New(values)
		best := time.Hour
		for range 5 {
			start := time.Now()
			s.Bytes(text)
			best = min(best, time.Since(start))
		}
		return best
	}
	c, p := scan(crafted), scan(plain)
	t.Logf("crafted %v, plain %v", c, p)
	if c > 10*p {
		t.Fatalf("text meeting the shared prefix scans in %v against %v for other values", c, p)
	}
}
