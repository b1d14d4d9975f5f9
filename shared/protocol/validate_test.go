package protocol

import (
	"regexp"
	"strings"
	"testing"
)

// The regular expressions the version and digest checks replaced, as
// their oracle.
var (
	versionRE = regexp.MustCompile(`^[A-Za-z0-9._+:@-]{0,64}$`)
	digestRE  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// FuzzVersionAndDigest: a claim's version and a blob's digest are
// accepted exactly when the regular expressions they replaced match.
func FuzzVersionAndDigest(f *testing.F) {
	for _, s := range []string{"", "v1.2.3", "1.0.0-rc.1+build:7@x", "v 1", "v/1", strings.Repeat("v", 64), strings.Repeat("v", 65),
		"sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("A", 64), "sha256:" + strings.Repeat("a", 63),
		"sha256:" + strings.Repeat("a", 65), "sha512:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 63) + "\n", "sha256:" + strings.Repeat("a", 63) + "g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		req := ClaimRequest{Version: s}
		if got, want := req.Validate() == nil, versionRE.MatchString(s); got != want {
			t.Fatalf("version %q accepted: %v, the expression says %v", s, got, want)
		}
		if got, want := ValidDigest(s), digestRE.MatchString(s); got != want {
			t.Fatalf("ValidDigest(%q) = %v, the expression says %v", s, got, want)
		}
		size := int64(1)
		if got, want := ValidBlob(s, &size) == nil, digestRE.MatchString(s); got != want {
			t.Fatalf("ValidBlob(%q) accepted: %v, the expression says %v", s, got, want)
		}
	})
}
