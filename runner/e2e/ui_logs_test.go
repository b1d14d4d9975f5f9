package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// watchCSP records, from the start of every document the tab loads, the
// Content-Security-Policy violations in window.__csp (the devtools
// protocol's script is not the page's: the policy does not stop it).
func watchCSP(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.__csp = []; document.addEventListener('securitypolicyviolation', function (e) {
			window.__csp.push(e.violatedDirective + ' ' + e.blockedURI); });`}); err != nil {
		t.Fatal(err)
	}
}

// noCSPViolation fails when the page broke its Content-Security-Policy.
func noCSPViolation(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.__csp || 'not watched')`))
	if err != nil || v != "[]" {
		t.Fatalf("%s: Content-Security-Policy violations: %s %v", where, v, err)
	}
}

// screenshot saves the page as docs/screenshots/<name>.png, for the docs.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testLogSections: a finished job's log shows a section per step with
// its duration (the failed one open, the others folded), a ::group::
// folded under its title, the lines' times on demand, text found (its
// section opened), and a raw log; nothing is blocked by the policy.
func testLogSections(t *testing.T, s *stack, ctx context.Context) {
	id, err := s.submit(writePipeline(t, `jobs:
  steps:
    runs-on: linux
    steps:
      - name: Greet
        run: echo hello from the first step
      - name: Grouped
        run: |
          echo "::group::Install things"
          echo inside the group
          echo "::endgroup::"
          echo a needle in the log
      - name: Fail
        run: |
          echo '<testsuite name="s"><testcase classname="pkg" name="TestOne"/><testcase classname="pkg" name="TestTwo" file="pkg/two_test.go" line="9"><failure message="&lt;b&gt;two&lt;/b&gt; failed"/></testcase></testsuite>' > report.xml
          echo about to fail
          exit 3
    reports: {junit: [report.xml]}
`), false)
	if err != nil {
		t.Fatal(err)
	}
	v := s.waitRun(id, func(v runView) bool { return v.State == "FAILED" }, 60*time.Second)
	eval := func(js string) string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return out
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.vals["FORGECI_URL"]+"/runs/"+id+"/jobs/"+v.Jobs[0].ID),
		chromedp.WaitReady(chromedp.CSS(`#log[data-complete]`))); err != nil {
		t.Fatal(err)
	}
	titles := eval(`[].map.call(document.querySelectorAll('#log details.section>summary'), function (s) { return s.textContent }).join('|')`)
	if !regexp.MustCompile(`^Set up job\|Greet \d+\.\ds\|Grouped \d+\.\ds\|Fail \d+\.\ds \(exit 3\)`).MatchString(titles) {
		t.Fatalf("sections: %s", titles)
	}
	if got := eval(`[0, 1, 2].map(function (i) { return document.getElementById('step-' + i).open }).join()`); got != "false,false,true" {
		t.Fatalf("open sections (only the failed one): %s", got)
	}
	if got := eval(`var g = document.querySelector('#step-1 details.group'); g.querySelector('summary').textContent + ',' + g.open + ',' + g.textContent.indexOf('inside the group')`); !strings.HasPrefix(got, "Install things,false,") || strings.HasSuffix(got, ",-1") {
		t.Fatalf("the group: %s", got)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#step-0>summary`))); err != nil {
		t.Fatal(err)
	}
	if txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#step-0`))); err != nil || !strings.Contains(txt, "hello from the first step") {
		t.Fatalf("the first step, expanded: %q %v", txt, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#log-times`))); err != nil {
		t.Fatal(err)
	}
	stamp := eval(`getComputedStyle(document.querySelector('#step-0 .line'), '::before').content`)
	if !regexp.MustCompile(`^"\d\d:\d\d:\d\d\.\d{3} "$`).MatchString(stamp) {
		t.Fatalf("a line's time shown: %s", stamp)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#log-find`), "NEEDLE")); err != nil {
		t.Fatal(err)
	}
	if got := eval(`document.getElementById('log-found').textContent + ',' + document.getElementById('step-1').open + ',' + document.querySelector('.line.hit').textContent`); got != "1 line,true,a needle in the log\n" {
		t.Fatalf("find: %q", got)
	}
	// The test report: counts, and the failure where it is, as text.
	if got := eval(`document.getElementById('tests-summary').textContent.split(' (')[0] + '|' + document.querySelector('#test-failures tbody').innerText.replace(/\s+/g, ' ').trim()`); got != "1 passed, 1 failed, 0 errored, 0 skipped|pkg.TestTwo failure pkg/two_test.go:9 <b>two</b> failed" {
		t.Fatalf("tests on the job page: %q", got)
	}
	screenshot(t, ctx, "job")
	noCSPViolation(t, ctx, "the job page")
	// The raw log may still be arriving when its body is ready: wait for
	// its text (a minute at most, the context's).
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#log-raw`)),
		chromedp.Poll[chromedp.Void](`document.contentType == 'text/plain' && document.body != null && document.body.innerText.indexOf('about to fail') >= 0`,
			chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Logf("the raw log did not show its text: %v", err)
	}
	if got := eval(`document.contentType + ',' + (document.body.innerText.indexOf('about to fail') >= 0)`); got != "text/plain,true" {
		t.Fatalf("the raw log: %s", got)
	}
}
