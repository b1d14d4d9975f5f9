package ui

import (
	"net/url"
	"strings"
	"testing"
)

// TestLocalPath: only paths on this site survive, including the tricks
// browsers fall for (a tab or newline they drop, a backslash they read as a
// slash).
func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"/runs/abc?generation=2": "/runs/abc?generation=2",
		"/":                      "/",
		"/projects/a%2Fb":        "/projects/a%2Fb",
		"":                       "",
		"//evil.example/":        "",
		"/\t/evil.example":       "",
		"/\n/evil.example":       "",
		"/\\evil.example":        "",
		"\\\\evil.example":       "",
		"/%2F/evil.example":      "",
		"https://evil.example/":  "",
		"javascript:alert(1)":    "",
		"runs/abc":               "",
		" /runs":                 "",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLocalPath: whatever it keeps, a browser resolving it against this
// site (after dropping tabs and newlines and reading "\" as "/", as the
// URL standard does) stays on this site. Oracle: time is linear (one
// parse) and the output never grows past the input's escaping.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/runs/x", "//evil", "/\t/evil", "/\\evil", "/%2F/x", "/a?b=c#d", "http://x/"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://ci.example/")
	f.Fuzz(func(t *testing.T, in string) {
		out := localPath(in)
		if out == "" {
			return
		}
		if len(out) > 3*len(in)+1 {
			t.Fatalf("%q grew to %q", in, out)
		}
		browser := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(out)
		u, err := url.Parse(browser)
		if err != nil {
			t.Fatalf("kept %q, which does not parse: %v", out, err)
		}
		if got := base.ResolveReference(u); got.Host != "ci.example" || got.Scheme != "https" {
			t.Fatalf("kept %q, which leads to %s", out, got)
		}
	})
}
