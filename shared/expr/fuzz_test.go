package expr_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/expr"
)

// FuzzTemplate parses and evaluates any text as a template against a
// context with arrays and objects. Oracle: it never panics, every error is
// at an offset inside the text, and parsing plus evaluating a text of at
// most 4 KiB takes under a second and allocates under 64 MB (results are
// bounded by expr.MaxResult however the functions nest).
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{
		"${{ github.ref == 'refs/heads/main' && 'yes' || 'no' }}",
		"run ${{ format('{0}-{1}', matrix.os, matrix.go) }} and ${{ join(event.commits.*.message, '\n') }}",
		"${{ fromJSON(json).s[0] }} ${{ toJSON(needs) }} ${{ contains(list, 'b') }}",
		"${{ format('{0}{0}', format('{0}{0}', format('{0}{0}', 'abcdefgh'))) }}",
		"${{ !(1 < '2') || 0x1F >= -3.5e2 }} ${{ success() && always() }}",
		"${{ x", "${{ }}", "${{ 'a''b' }}}}${{",
	} {
		f.Add(s)
	}
	c := testContext()
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4<<10 {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		tpl, errs := expr.ParseTemplate(src)
		for _, e := range errs {
			if e.Offset < 0 || e.Offset > len(src) {
				t.Fatalf("error %q at %d, outside the %d-byte text", e.Message, e.Offset, len(src))
			}
		}
		if len(errs) == 0 {
			if out, err := tpl.Eval(c); err == nil && len(out) > expr.MaxResult+len(src) {
				t.Fatalf("a %d-byte result", len(out))
			}
		}
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; d > time.Second || alloc > 64<<20 {
			t.Fatalf("%d bytes: %v and %d MB", len(src), d, alloc>>20)
		}
	})
}
