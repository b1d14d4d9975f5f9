package pipeline

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// FuzzFilterPattern compiles any text as one of GitHub's filter patterns
// and matches names with it. Oracle: it never panics; a pattern with no
// special character matches exactly itself; one accepted compiles to an
// anchored expression; compiling and matching a pattern of at most 1 KiB
// against names of at most 1 KiB takes under 100 ms and 16 MB.
func FuzzFilterPattern(f *testing.F) {
	for _, s := range []string{"feature/*", "releases/**-alpha", "v[12].[0-9]+.[0-9]+", "*.jsx?", "**/docs/**",
		`\*x`, "[", "a+", "**/", "ü*"} {
		f.Add(s, "feature/x")
	}
	special := regexp.MustCompile(`[*?+\[\]\\]`)
	f.Fuzz(func(t *testing.T, p, name string) {
		if len(p) > 1<<10 || len(name) > 1<<10 {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		re, err := globRegexp(p)
		if err == nil {
			re.MatchString(name)
			if !special.MatchString(p) && p != "" {
				if !re.MatchString(p) || (name != p && re.MatchString(name)) {
					t.Fatalf("plain pattern %q: matches itself %v, matches %q %v", p, re.MatchString(p), name, re.MatchString(name))
				}
			}
			if s := re.String(); !strings.HasPrefix(s, "^") || !strings.HasSuffix(s, "$") {
				t.Fatalf("%q compiles to unanchored %q", p, s)
			}
		}
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; d > 100*time.Millisecond || alloc > 16<<20 {
			t.Fatalf("%d bytes: %v and %d MB", len(p), d, alloc>>20)
		}
	})
}
