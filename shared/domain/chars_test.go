package domain

import (
	"regexp"
	"strings"
	"testing"
)

// The regular expressions the loops replaced, as their oracle.
var (
	labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$`)
	hex64RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

var charSeeds = []string{"", "linux", "x86_64", "self-hosted", "gpu:a100", "a/b", "-x", ".x", "_x", "x y", "é", "x\x00",
	"linux\n", strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("f", 64), strings.Repeat("F", 64),
	strings.Repeat("0", 63) + "g", "ABC", "a@b", "a+b"}

// FuzzValidLabel: ValidLabel and LowerHex say what the regular
// expressions they replaced say, for any input.
func FuzzValidLabel(f *testing.F) {
	for _, s := range charSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidLabel(s), labelRE.MatchString(s); got != want {
			t.Fatalf("ValidLabel(%q) = %v, the expression says %v", s, got, want)
		}
		if got, want := LowerHex(s, 64), hex64RE.MatchString(s); got != want {
			t.Fatalf("LowerHex(%q, 64) = %v, the expression says %v", s, got, want)
		}
	})
}

func TestOnlyChars(t *testing.T) {
	for s, want := range map[string]bool{"": true, "v1.2.3": true, "v1.2.3-rc+b:1@x": true, "a b": false, "a/b": false,
		"é": false, "a\x00": false, "Z9": true} {
		if got := OnlyChars(s, "._+:@-"); got != want {
			t.Errorf("OnlyChars(%q) = %v, want %v", s, got, want)
		}
	}
}
