package ui

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// evil is what a hostile project, job, artifact, branch or user name could
// hold: it breaks out of text, of a double- or single-quoted attribute and
// of a URL.
const evil = `x"'><script>alert(1)</script><img src=y onerror=alert(2)>javascript:alert(3)`

// fill sets every string reachable from v (fields, slices and maps of one
// element, pointers) to evil, and every bool to on, so that each branch that shows a
// value is taken.
func fill(v reflect.Value, on bool) {
	switch v.Kind() {
	case reflect.String:
		if v.Type() != reflect.TypeFor[svg]() { // markup the charts built
			v.SetString(evil)
		}
	case reflect.Bool:
		v.SetBool(on)
	case reflect.Int, reflect.Int64:
		if v.Type() != reflect.TypeFor[time.Duration]() {
			v.SetInt(2)
		}
	case reflect.Pointer:
		if v.Type() == reflect.TypeFor[*time.Time]() {
			now := time.Now()
			v.Set(reflect.ValueOf(&now))
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), on)
		v.Set(p)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(key, on)
		if val.Kind() == reflect.Interface {
			val.Set(reflect.ValueOf(evil))
		} else {
			fill(val, on)
		}
		m.SetMapIndex(key, val)
		v.Set(m)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), on)
		v.Set(s)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), on)
			}
		}
	}
}

// TestPagesEscapeEverything: every page, with every value hostile and
// every optional part shown, carries no markup of the values' own: text
// and attributes are escaped, and a link a user gave (a deployment's URL)
// is not a javascript: one.
func TestPagesEscapeEverything(t *testing.T) {
	pages := map[string]any{"login": page{}, "error": page{}, "runs": runsPage{}, "run": runPage{}, "job": jobPage{},
		"queue": queuePage{}, "runners": runnersPage{}, "projects": projectsPage{}, "project": projectPage{},
		"environment": environmentPage{}, "dispatch": dispatchPage{}}
	for name, data := range pages {
		for _, on := range []bool{true, false} {
			v := reflect.New(reflect.TypeOf(data)).Elem()
			fill(v, on)
			var o out
			if err := writePage(&o, name, v.Interface()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := o.String()
			for _, bad := range []string{"<script>", "<img src=y", `x"'`, `"javascript:`, "'>"} {
				if strings.Contains(got, bad) {
					i := strings.Index(got, bad)
					t.Errorf("%s (options %v) carries %q unescaped: …%s…", name, on, bad, got[max(0, i-80):min(len(got), i+40)])
				}
			}
			if !strings.Contains(got, "&lt;script&gt;") && name != "login" {
				t.Errorf("%s (options %v) shows none of the values", name, on)
			}
		}
	}
}

// TestHrefRefusesSchemes: a link target from a user is a path of this site
// or an http(s) address.
func TestHrefRefusesSchemes(t *testing.T) {
	for in, want := range map[string]string{
		"https://ok.example/a?b=c&d": "https://ok.example/a?b=c&amp;d", "/runs/1": "/runs/1",
		"javascript:alert(1)": "#ZgotmplZ", "JavaScript:alert(1)": "#ZgotmplZ", "data:text/html,x": "#ZgotmplZ",
		"//evil.example": "//evil.example", "relative": "#ZgotmplZ", " javascript:x": "#ZgotmplZ",
	} {
		var o out
		o.href(in)
		if o.String() != want {
			t.Errorf("href(%q) = %q, want %q", in, o.String(), want)
		}
	}
}

// TestDeploymentReviewShowsInputs: a manual run's inputs reach its steps'
// scripts, so the reviewer of its deployment sees them, quoted (a newline,
// a quote, a bidi override or a no-break space in a value is seen, not
// hidden or reordered), and so does the run page.
func TestDeploymentReviewShowsInputs(t *testing.T) {
	inputs := map[string]any{"target": "prod\"; curl x | sh\n#\u202e\u00a0", "dry": false}
	p := jobPage{Run: store.Run{Inputs: inputs}, CanWrite: true}
	p.Job.Environment, p.Job.DeployState, p.Job.State = "production", "waiting", "PENDING"
	var o out
	if err := writePage(&o, "job", p); err != nil {
		t.Fatal(err)
	}
	want := `<span id="deploy-inputs">dry <code class="input">false</code>, target <code class="input">&#34;prod\&#34;; curl x | sh\n#\u202e\u00a0&#34;</code></span>`
	if got := o.String(); !strings.Contains(got, want) {
		t.Fatalf("the review does not show the inputs %s:\n%s", want, got)
	}
	o = out{}
	if err := writePage(&o, "run", runPage{Run: store.Run{Inputs: inputs}}); err != nil {
		t.Fatal(err)
	}
	if got := o.String(); !strings.Contains(got, `<dd id="run-inputs">dry <code class="input">false</code>, target`) {
		t.Fatalf("the run page does not show the inputs:\n%s", got)
	}
}

// TestRunNameShown: a run's name (its pipeline's run-name) is on its page
// and in the runs list; a run without one shows no empty line.
func TestRunNameShown(t *testing.T) {
	for _, tc := range []struct {
		page string
		data any
	}{
		{"run", runPage{Run: store.Run{RunName: "Deploy #7 by ann"}}},
		{"runs", runsPage{Runs: []store.Run{{RunName: "Deploy #7 by ann"}}}},
	} {
		var o out
		if err := writePage(&o, tc.page, tc.data); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(o.String(), `class="run-name"`) || !strings.Contains(o.String(), "Deploy #7 by ann</") {
			t.Errorf("%s page: no run name", tc.page)
		}
	}
	var o out
	if err := writePage(&o, "run", runPage{}); err != nil || strings.Contains(o.String(), `class="run-name"`) {
		t.Errorf("a run without a name: %v", err)
	}
}

// TestVariablesShown: the project page lists its variables with their
// values, for every member (they are not secret).
func TestVariablesShown(t *testing.T) {
	var o out
	p := projectPage{Variables: []store.Variable{{Name: "REGION", Value: "eu-west-1 <b>"}}}
	if err := writePage(&o, "project", p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(o.String(), `<code>REGION</code></td><td><code class="input">eu-west-1 &lt;b&gt;</code>`) {
		t.Fatalf("page:\n%s", o.String())
	}
}
