package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// pageBudget is the most a page may transfer, its log feeds left out.
const pageBudget = 100 << 10

// checkPhone opens each page on a phone-sized viewport with the CPU slowed
// four times: each stays within pageBudget bytes (HTML, style, script and
// whatever else it loads, not the log it follows) and fits the screen's
// width (wide tables scroll inside themselves).
func checkPhone(t *testing.T, ctx context.Context, base string, paths []string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, emulation.SetCPUThrottlingRate, emulation.SetCPUThrottlingRateParams{Rate: 4}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = chromedp.Call(ctx, emulation.SetCPUThrottlingRate, emulation.SetCPUThrottlingRateParams{Rate: 1})
		_ = chromedp.Do(ctx, chromedp.EmulateReset())
	}()
	for _, p := range paths {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+p), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatal(err)
		}
		// Caches would hide what a first visit costs: decoded sizes count.
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function () {
			var total = 0;
			performance.getEntries().forEach(function (e) {
				if (e.entryType !== 'navigation' && e.entryType !== 'resource') return;
				if (/\/(log|steps)\?/.test(e.name)) return;
				total += e.decodedBodySize || e.transferSize || 0;
			});
			return total + ',' + document.documentElement.scrollWidth + ',' + window.innerWidth;
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		var bytes, scroll, width int
		if _, err := fmt.Sscanf(got, "%d,%d,%d", &bytes, &scroll, &width); err != nil {
			t.Fatalf("%s: %q", p, got)
		}
		if bytes > pageBudget || bytes == 0 {
			t.Errorf("%s: %d bytes, over the budget of %d (or none measured)", p, bytes, pageBudget)
		}
		if scroll > width {
			t.Errorf("%s: %d pixels wide on a %d-pixel screen", p, scroll, width)
		}
	}
}
