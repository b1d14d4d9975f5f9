package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// newBrowser starts Debian's headless Chromium, with the flags that keep
// it off this machine's closed network.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make deps installs it)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// TestDashboard drives the dashboard in headless Chromium against the real
// stack: log in with an API token, open a run, watch a running job's log
// grow, cancel the job and see CANCELED; markup injected into the log, the
// trigger and the ref is shown as text and never runs.
func TestDashboard(t *testing.T) {
	s := start(t)
	const evil = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>`
	dir := writePipeline(t, `jobs:
  slow:
    runs-on: linux
    steps:
      - run: |
          printf '\033[31mred alert\033[0m\n'
          echo '`+evil+`'
          for i in $(seq 1 300); do echo "line $i"; sleep 0.2; done
`)
	runID, err := s.submit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := newBrowser(t)
	url := s.vals["FORGECI_URL"]
	do := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatal(err)
		}
	}
	text := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	watchCSP(t, ctx)
	do(chromedp.Navigate(url+"/runs/"+runID), chromedp.WaitVisible(chromedp.ID("token")))
	screenshot(t, ctx, "login")
	do(chromedp.SendKeys(chromedp.ID("token"), "fru_wrong"), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("error")))
	if e := text("error"); !strings.Contains(e, "unknown") {
		t.Fatalf("bad token: %q", e)
	}
	do(chromedp.Navigate(url+"/login?next=/runs/"+runID), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), s.vals["FORGECI_TOKEN"]), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("run-state")), chromedp.Click(chromedp.ID("job-slow")),
		chromedp.WaitVisible(chromedp.ID("log")))
	// poll reads an element's text while the page may be between loads (a
	// form post's redirect, the run page's reload): the node can vanish
	// between being found and being read, which is "not yet", not failure.
	poll := func(id string) string {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			return ""
		}
		return v
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; log shows:\n%s", what, poll("log"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitFor("line 3", func() bool { return strings.Contains(poll("log"), "line 3\n") })
	// The live log shows its lines' times on demand, as they come.
	do(chromedp.Click(chromedp.ID("log-times")))
	waitFor("a line's time", func() bool {
		return regexp.MustCompile(`^"\d\d:\d\d:\d\d\.\d{3} "$`).MatchString(eval(`(function () { var l = [].filter.call(document.querySelectorAll('#log .line'),
			function (e) { return /line 3\n/.test(e.textContent) })[0]; return l ? getComputedStyle(l, '::before').content : 'none' })()`))
	})
	noCSPViolation(t, ctx, "the live job page")
	n1 := len(text("log"))
	waitFor("the log to grow", func() bool { return len(poll("log")) > n1+20 })

	if v := eval(`String(window.__pwned) + "," + document.querySelectorAll('#log img, #log script').length`); v != "undefined,0" {
		t.Fatalf("markup in the log ran or became elements: %s", v)
	}
	if !strings.Contains(text("log"), evil) {
		t.Fatalf("the markup is not shown as text:\n%s", text("log"))
	}
	red := eval(`(function(){var s=[].find.call(document.querySelectorAll('#log span'),function(e){return e.textContent === 'red alert'});return s?s.className:'none'})()`)
	if red != "ansi-31" {
		t.Fatalf("ANSI red rendered with class %q; log HTML: %.600s", red, eval(`document.getElementById('log').innerHTML`))
	}

	do(chromedp.Click(chromedp.ID("cancel-job")), chromedp.WaitVisible(chromedp.ID("log")))
	waitFor("CANCELED", func() bool { return poll("job-state") == "CANCELED" })
	do(chromedp.Navigate(url+"/runs/"+runID), chromedp.WaitVisible(chromedp.ID("run-state")))
	if st := text("run-state"); st != "CANCELED" {
		t.Fatalf("run page shows %q", st)
	}

	// Markup in a user's name, which the server shows as a run's trigger
	// (cli:<name>) and cache scope, is text too. That member has no secrets
	// permission: their first run waits, and the admin approves it here.
	member := s.apiCall("POST", "/v1/users", s.vals["FORGECI_TOKEN"], map[string]any{"name": evil, "role": "user"}, 201)
	project := s.apiCall("GET", "/v1/projects/e2e", s.vals["FORGECI_TOKEN"], nil, 200)
	s.apiCall("POST", "/v1/projects/"+project["id"].(string)+"/members", s.vals["FORGECI_TOKEN"],
		map[string]any{"user": evil, "role": "write"}, 200)
	quick := writePipeline(t, "jobs:\n  quick:\n    runs-on: linux\n    steps: [{run: 'true'}]\n")
	waiting, err := s.submitAs(quick, member["token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	do(chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.CSS("table.runs")))
	listText, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("table.runs")))
	if err != nil {
		t.Fatal(err)
	}
	if v := eval(`String(window.__pwned) + "," + document.querySelectorAll('table.runs b, table.runs img, table.runs script').length`); v != "undefined,0" ||
		!strings.Contains(listText, "cli:"+evil) {
		t.Fatalf("runs list: %s\n%s", v, listText)
	}
	do(chromedp.Navigate(url+"/runs/"+waiting), chromedp.WaitVisible(chromedp.ID("approve-run")))
	if v := eval(`String(window.__pwned) + "," + document.querySelectorAll('main img, main script').length`); v != "undefined,0" ||
		!strings.Contains(text("run-trust"), "cli/"+evil) || !strings.Contains(text("run-approval"), "waiting for approval") {
		t.Fatalf("waiting run page: %s, trust %q, approval %q", v, text("run-trust"), text("run-approval"))
	}
	do(chromedp.Click(chromedp.ID("approve-run")), chromedp.WaitVisible(chromedp.ID("run-approval")))
	waitFor("the approval", func() bool { return strings.Contains(poll("run-approval"), "approved by admin") })
	s.waitRun(waiting, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)

	// A manual run from the project page: the form asks for the inputs
	// the branch's newest snapshot declares, typed.
	if _, err := s.submit(gitCheckout(t, manualYAML), false); err != nil {
		t.Fatal(err)
	}
	do(chromedp.Navigate(url+"/projects/e2e"), chromedp.WaitVisible(chromedp.ID("run-by-hand")),
		chromedp.Click(chromedp.ID("run-by-hand")), chromedp.WaitVisible(chromedp.ID("dispatch")))
	if v := eval(`document.getElementById('input-target').tagName + "," + document.getElementById('input-replicas').type + "," + document.getElementById('input-replicas').value`); v != "SELECT,number,2" {
		t.Fatalf("the form's inputs: %s", v)
	}
	do(chromedp.SetValue(chromedp.ID("input-target"), "production"), chromedp.SetValue(chromedp.ID("input-replicas"), "5"),
		chromedp.Click(chromedp.ID("dispatch-run")), chromedp.WaitVisible(chromedp.ID("run-state")))
	manual := eval(`location.pathname.split('/')[2]`)
	v := s.waitRun(manual, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)
	if log := s.log(manual, v.Jobs[0].ID); !strings.Contains(log, "deploying to production with 5 replicas from main") {
		t.Fatalf("the manual run's log:\n%s", log)
	}

	// An artifact downloaded from the run page is the artifact: its bytes
	// hash to the digest the page shows.
	built, err := s.submit(writePipeline(t, "jobs:\n  build:\n    runs-on: linux\n    steps:\n      - run: mkdir -p dist && echo built > dist/out.txt\n    artifacts: [{name: dist, paths: [dist/]}]\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	s.waitRun(built, func(v runView) bool { return v.State == "PASSED" }, 60*time.Second)
	downloads := t.TempDir()
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
		t.Fatal(err)
	}
	do(chromedp.Navigate(url+"/runs/"+built), chromedp.WaitVisible(chromedp.ID("artifacts")))
	digest := eval(`document.querySelector('#artifacts code').title`)
	do(chromedp.Click(chromedp.ID("artifact-build-dist")))
	var got []byte
	waitFor("the download", func() bool {
		entries, _ := os.ReadDir(downloads)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".crdownload") {
				got, _ = os.ReadFile(filepath.Join(downloads, e.Name()))
				return len(got) > 0
			}
		}
		return false
	})
	if sum := sha256.Sum256(got); "sha256:"+hex.EncodeToString(sum[:]) != digest {
		t.Fatalf("the downloaded %d bytes do not hash to %s", len(got), digest)
	}
	screenshot(t, ctx, "run")
	noCSPViolation(t, ctx, "the run page")
	testLogSections(t, s, ctx)
	// The runs list, filtered by state from its form: only failed runs.
	do(chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.ID("run-filters")),
		chromedp.SetValue(chromedp.ID("filter-state"), "FAILED"), chromedp.Click(chromedp.ID("filter-runs")),
		chromedp.WaitVisible(chromedp.CSS("table.runs")))
	waitFor("the filtered list", func() bool { return strings.Contains(eval(`location.search`), "state=FAILED") })
	if got := eval(`[].map.call(document.querySelectorAll('table.runs tbody tr td:nth-child(2)'), function (e) { return e.textContent }).join()`); got == "" || strings.Trim(strings.ReplaceAll(got, "FAILED", ""), ",") != "" {
		t.Fatalf("runs filtered by FAILED: %s", got)
	}
	// A hook hears the next run fail; the project page shows the delivery.
	heard := make(chan string, 8)
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heard <- r.Header.Get("X-ForgeCI-Event")
	}))
	defer hookSrv.Close()
	s.apiCall("POST", "/v1/projects/e2e/hooks", s.vals["FORGECI_TOKEN"], map[string]any{"url": hookSrv.URL, "events": []string{"run_ended"}}, 201)
	failing, err := s.submit(writePipeline(t, "jobs:\n  no:\n    runs-on: linux\n    steps: [{run: 'false'}]\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	s.waitRun(failing, func(v runView) bool { return v.State == "FAILED" }, 60*time.Second)
	select {
	case ev := <-heard:
		if ev != "run_ended" {
			t.Fatalf("the hook heard %q", ev)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the hook heard nothing")
	}
	do(chromedp.Navigate(url+"/projects/e2e"), chromedp.WaitVisible(chromedp.ID("notifications")))
	waitFor("the delivery on the project page", func() bool {
		do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("notifications")))
		return strings.Contains(text("notifications"), "DELIVERED")
	})
	for _, p := range []struct{ name, path, ready string }{{"runs", "/", "table.runs"}, {"projects", "/projects", "table.projects"},
		{"project", "/projects/e2e", "#storage"}, {"dispatch", "/projects/e2e/run", "#dispatch"}, {"runners", "/runners", "table.runners"},
		{"queue", "/queue", "#queue"}} {
		do(chromedp.Navigate(url+p.path), chromedp.WaitVisible(chromedp.CSS(p.ready)))
		screenshot(t, ctx, p.name)
		noCSPViolation(t, ctx, p.path)
	}
	// A second run of the failing job: its page charts both runs' durations.
	again, err := s.submit(writePipeline(t, "jobs:\n  no:\n    runs-on: linux\n    steps: [{run: 'sleep 1; false'}]\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	av := s.waitRun(again, func(v runView) bool { return v.State == "FAILED" }, 60*time.Second)
	noPage := "/runs/" + again + "/jobs/" + av.Jobs[0].ID
	do(chromedp.Navigate(url+noPage), chromedp.WaitVisible(chromedp.ID("duration-chart")))
	if n := eval(`String(document.querySelectorAll('#duration-chart rect.bar').length)`); n != "2" {
		t.Fatalf("the duration chart has %s bars, want 2", n)
	}
	bv := s.run(built)
	checkPhone(t, ctx, url, []string{"/", "/queue", "/projects", "/projects/e2e", "/runners", "/runs/" + built,
		"/runs/" + built + "/jobs/" + bv.Jobs[0].ID, "/projects/e2e/run", noPage})
	// The runner said what it is when it polled: a version and its two slots.
	do(chromedp.Navigate(url+"/runners"), chromedp.WaitVisible(chromedp.ID("runner-e2e")))
	if row := text("runner-e2e"); strings.Contains(row, "unknown") || !strings.Contains(row, " of 2") {
		t.Fatalf("the runner's row: %s", row)
	}
}

// apiCall calls the user API with token and wants status; it returns the
// JSON object answered.
func (s *stack) apiCall(method, path, token string, in any, status int) map[string]any {
	s.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.vals["FORGECI_URL"]+path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode != status {
		s.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return out
}
