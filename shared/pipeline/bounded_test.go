package pipeline_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml/lexer"

	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/pipeline/pipelinetest"
)

// maxParseBytes is the memory any file may cost Parse (bytes allocated).
const maxParseBytes = 64 << 20

// cost is what parsing one input took.
type cost struct {
	p     *pipeline.Pipeline
	err   error
	d     time.Duration
	alloc uint64 // bytes allocated
}

func parseCost(src []byte) cost {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	p, err := pipeline.Parse("f.yml", src)
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	return cost{p, err, d, after.TotalAlloc - before.TotalAlloc}
}

// oneError is err's only Error, or a test failure.
func oneError(t *testing.T, err error) pipeline.Error {
	t.Helper()
	var errs pipeline.Errors
	if !errors.As(err, &errs) || len(errs) != 1 {
		t.Fatalf("want one located error, got %v", err)
	}
	if errs[0].Line < 1 || errs[0].Column < 1 {
		t.Fatalf("unlocated: %v", errs[0])
	}
	return errs[0]
}

// TestIssueInputs: the inputs of the issue "Bounded input and bounded
// storage" are refused at once (they took go-yaml 1.1 s and 175 MB at
// 20 KB, 33 s and 5.5 GB at 120 KB), each with one located error.
func TestIssueInputs(t *testing.T) {
	env := func(values, jobs int) []byte {
		var b strings.Builder
		b.WriteString("env:\n")
		for i := range values {
			fmt.Fprintf(&b, "  V%d: %s\n", i, strings.Repeat("x", 32000))
		}
		b.WriteString("jobs:\n")
		for i := range jobs {
			fmt.Fprintf(&b, "  j%d: {steps: [{run: x}]}\n", i)
		}
		return []byte(b.String())
	}
	deepMaps := "jobs:\n"
	for d := 1; d <= 40; d++ {
		deepMaps += strings.Repeat(" ", d) + "a:\n"
	}
	cases := []struct {
		name string
		src  []byte
		want string
	}{
		{"nested [ 20 KB", []byte("jobs: " + strings.Repeat("[", 20_000)), "f.yml:1:39: : nesting is deeper than 32 levels"},
		{"nested [ 40 KB", []byte("jobs: " + strings.Repeat("[", 40_000)), "f.yml:1:39: : nesting is deeper than 32 levels"},
		{"nested [ 120 KB", []byte("jobs: " + strings.Repeat("[", 120_000)), "f.yml:1:39: : nesting is deeper than 32 levels"},
		{"nested [ closed", []byte("jobs: " + strings.Repeat("[", 60_000) + strings.Repeat("]", 60_000)), "f.yml:1:39: : nesting is deeper than 32 levels"},
		{"nested {", []byte("jobs: " + strings.Repeat("{a: ", 30_000)), "f.yml:1:135: : nesting is deeper than 32 levels"},
		{"deep block maps", []byte(deepMaps), "f.yml:33:34: : nesting is deeper than 32 levels"},
		{"deep block sequences", []byte("jobs:\n" + strings.Repeat("- ", 40) + "x\n"), "f.yml:2:63: : nesting is deeper than 32 levels"},
		{"0.96 MB of env for 250 jobs", env(30, 250), "f.yml:1:1: : file is 967131 bytes, over the limit of 262144"},
		{"224 KB of env for 250 jobs", env(7, 250), "f.yml:2:3: env: is 224014 bytes: a job's environment is limited to 65536"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c2 := parseCost(c.src)
			if got := oneError(t, c2.err).Error(); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if c2.d > time.Second || c2.alloc > maxParseBytes {
				t.Errorf("refused in %v with %d MB allocated", c2.d, c2.alloc>>20)
			}
		})
	}
}

// TestRunSpecLimits: the job specs a run makes are bounded in all (the
// env is shared, not copied, until the limit), for one job, and before
// any job is expanded.
func TestRunSpecLimits(t *testing.T) {
	var shared strings.Builder
	shared.WriteString("env:\n")
	for i := range 2 {
		fmt.Fprintf(&shared, "  V%d: %s\n", i, strings.Repeat("x", 30000))
	}
	shared.WriteString("jobs:\n")
	for i := range 250 {
		fmt.Fprintf(&shared, "  j%d: {steps: [{run: x}]}\n", i)
	}
	manyJobs := "jobs:\n"
	for i := range pipeline.MaxJobs + 1 {
		manyJobs += fmt.Sprintf("  j%d: {steps: [{run: x}]}\n", i)
	}
	long := strings.Repeat("y", pipeline.MaxJobName-10) // a job's name holds it
	cases := []struct{ name, src, want string }{
		{"60 KB of env for 250 jobs", shared.String(), `f.yml:74:9: jobs.j69: job "j69": the run's job specs reach 4204060 bytes of JSON here, over the limit of 4194304 for a run`},
		{"a matrix value named many times", "jobs:\n  a:\n    strategy: {matrix: {x: [" + long + "]}}\n    steps: [{run: '" + strings.Repeat("${{ matrix.x }}", 1400) + "'}]\n",
			`f.yml:3:5: jobs.a: job "a (` + long + `)": its spec is over 262144 bytes of JSON, the limit of one job`},
		{"more jobs than MaxJobs", manyJobs, "f.yml:2:3: jobs: the pipeline has 501 jobs, over the limit of 500"},
		{"a matrix over MaxJobs", "jobs:\n  a:\n    strategy: {matrix: {x: [" + values(256) + "]}}\n    steps: [{run: x}]\n" +
			"  b:\n    strategy: {matrix: {x: [" + values(256) + "]}}\n    steps: [{run: x}]\n",
			"f.yml:1:1: jobs: the pipeline expands to 512 jobs, over the limit of 500"},
		{"too many env variables", "env: {" + envVars(300) + "}\njobs: {a: {steps: [{run: x}]}}\n", "f.yml:1:7: env: holds 300 variables, over the limit of 256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c2 := parseCost([]byte(c.src))
			if got := oneError(t, c2.err).Error(); got != c.want {
				t.Errorf("got  %.300s\nwant %.300s", got, c.want)
			}
			if c2.d > time.Second || c2.alloc > maxParseBytes {
				t.Errorf("refused in %v with %d MB allocated", c2.d, c2.alloc>>20)
			}
		})
	}
}

func envVars(n int) string {
	var vars []string
	for i := range n {
		vars = append(vars, fmt.Sprintf("V%d: x", i))
	}
	return strings.Join(vars, ", ")
}

func values(n int) string {
	var vs []string
	for i := range n {
		vs = append(vs, fmt.Sprint(i))
	}
	return strings.Join(vs, ", ")
}

// TestRealisticAccepted: realistic pipelines, brackets and braces in their
// plain, quoted and block scalars and comments, parse at every size up to
// the limit.
func TestRealisticAccepted(t *testing.T) {
	for _, size := range []int{20 << 10, 40 << 10, 120 << 10, pipeline.MaxFileBytes} {
		src := pipelinetest.Realistic(size)
		p, err := pipeline.Parse("f.yml", src)
		if err != nil || len(p.Jobs) == 0 {
			t.Fatalf("%d bytes: %v", len(src), err)
		}
		if len(src) < size-2<<10 {
			t.Fatalf("realistic pipeline of %d bytes for %d", len(src), size)
		}
	}
	for _, run := range []string{
		"run: echo [[ x ]]",
		"run: test [ -f x ] && echo {a,b} && echo ${{ matrix.os }}",
		"run: 'echo ''[[[{{{'' # not a comment'",
		`run: "echo \"[[[\" \\ {{{"`,
		"run: |\n          [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n          {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{ - a: b\n          ]]]]",
		"run: >-\n          ]]]] [[[[ {{{{ }}}} - ? : #",
		"run: make # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
	} {
		src := "jobs:\n  a:\n    strategy: {matrix: {os: [debian]}}\n    steps:\n      - " + run + "\n"
		if _, err := pipeline.Parse("f.yml", []byte(src)); err != nil {
			t.Errorf("%q: %v", run, err)
		}
	}
}

// TestBoundedParse: every input of the adversarial corpus, at each size,
// allocates at most 64 MB and parses (or is refused) within 10 times the
// time of a realistic pipeline of the same size. Times are the best of a
// few runs, and of 10 runs of both, taken in turns so that a busy machine
// weighs on both, before a failure is reported.
func TestBoundedParse(t *testing.T) {
	sizes := []int{20 << 10, pipeline.MaxFileBytes}
	if testing.Short() {
		sizes = sizes[1:]
	}
	for _, size := range sizes {
		realistic := pipelinetest.Realistic(size)
		_, base := bestTimes(realistic, realistic, 5)
		for _, c := range pipelinetest.Adversarial(size) {
			got := parseCost(c.Src)
			if got.alloc > maxParseBytes {
				t.Errorf("%s at %d KiB: %d MB allocated", c.Name, size>>10, got.alloc>>20)
			}
			if got.err != nil && !strings.HasPrefix(got.err.Error(), "f.yml:") {
				t.Errorf("%s at %d KiB: unlocated %v", c.Name, size>>10, got.err)
			}
			if d := min(got.d, parseCost(c.Src).d); d > 10*base {
				if d, base := bestTimes(c.Src, realistic, 10); d > 10*base {
					t.Errorf("%s at %d KiB: %v, over 10 times the %v of a realistic pipeline", c.Name, size>>10, d, base)
				}
			}
		}
	}
}

// TestRealisticCosts: a realistic pipeline at the size limit uses a tenth
// or less of each budget of the bounded parser, and two thirds of the
// node limit (it has 27,000 tokens; the densest real CI files we measured
// would have 40,000 at 256 KiB).
func TestRealisticCosts(t *testing.T) {
	c, err := pipeline.TokenCosts(pipelinetest.Realistic(pipeline.MaxFileBytes))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tokens*3/2 > c.MaxTokens || c.Paths*10 > c.MaxPaths || c.Copies*10 > c.MaxCopies || c.Shifts*10 > c.MaxShifts {
		t.Errorf("a realistic pipeline costs %+v", c)
	}
}

// TestEachLimitLocated: each bound refuses with its own located message.
func TestEachLimitLocated(t *testing.T) {
	keys := "jobs:\n"
	for i := range 1500 {
		keys += fmt.Sprintf("  k%d: v\n", i)
	}
	cases := []struct{ name, src, want string }{
		{"not UTF-8", "jobs:\n  a: \xff\n", "f.yml:2:6: : the file is not valid UTF-8"},
		{"run of <", "jobs: " + strings.Repeat("<", 300), "f.yml:1:263: : more than 256 '<' in a row"},
		{"tabs", "jobs: \"" + strings.Repeat("\ta", 2000) + "\"\n", "f.yml:1:4009: : too many tabs on long lines"},
		{"blank lines", "jobs: |\n" + strings.Repeat("  x\n", 20000) + strings.Repeat("\n", 20), "f.yml:20018:1: : 17 blank lines in a row at this point of a file this size: at most 16"},
		{"nodes", "jobs: [" + strings.Repeat("a,", 30000) + "a]\n", "f.yml:1:50005: : the file has more than 50000 YAML nodes"},
		{"depth", "jobs: " + strings.Repeat("[", 33), "f.yml:1:39: : nesting is deeper than 32 levels"},
		{"documents", "---\njobs: {}\n---\n---\n", "f.yml:4:1: : the file must hold exactly one YAML document"},
		{"key copies", keys, "f.yml:514:3: : a block mapping has too many keys for a file this size"},
		{"key paths", "jobs:\n" + deepKeys(10, 200) + strings.Repeat(" ", 11) + "[" + strings.Repeat("a,", 600) + "a]\n", "f.yml:12:1004: : keys nest too deep or are too long"},
		{"empty values", "jobs:\n" + strings.Repeat("-\n", 200) + "- [" + strings.Repeat("a,", 10000) + "a]\n", "f.yml:53:1: : too many empty values"},
		{"alias", "env: &e {A: b}\njobs: {a: {env: *e, steps: [{run: x}]}}\n", "f.yml:2:17: jobs.a.env: must be a mapping, not an alias (anchors and aliases are not supported)"},
		{"merge key", "env: &e {A: b}\njobs: {a: {<<: *e, steps: [{run: x}]}}\n", `f.yml:2:12: jobs.a.<<: unknown key "<<"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := pipeline.Parse("f.yml", []byte(c.src))
			if got := oneError(t, err).Error(); !strings.HasPrefix(got, c.want) {
				t.Errorf("got  %.200s\nwant %s", got, c.want)
			}
		})
	}
}

// deepKeys is n nested block mapping keys of keyLen bytes.
func deepKeys(n, keyLen int) string {
	var b strings.Builder
	for d := 1; d <= n; d++ {
		fmt.Fprintf(&b, "%s%s:\n", strings.Repeat(" ", d), strings.Repeat("k", keyLen))
	}
	return b.String()
}

// TestPrescanCountsTokens: the pre-scan never counts fewer tokens than
// go-yaml's lexer makes (FuzzParse checks the same on every input).
func TestPrescanCountsTokens(t *testing.T) {
	inputs := [][]byte{pipelinetest.Realistic(20 << 10)}
	for _, c := range pipelinetest.Adversarial(4 << 10) {
		inputs = append(inputs, c.Src)
	}
	for _, s := range tokenCountCases {
		inputs = append(inputs, []byte(s))
	}
	for _, src := range inputs {
		got, err := pipeline.PrescanTokens(src)
		if err != nil {
			continue
		}
		if want := len(lexer.Tokenize(string(src))); got < want {
			t.Errorf("%q: counted %d tokens, go-yaml makes %d", src, got, want)
		}
	}
}

// tokenCountCases are inputs where go-yaml's lexer is easy to misread:
// each was once counted short by the pre-scan while it was written.
var tokenCountCases = []string{
	" \t\nfoo: 1\n",                     // spaces and a tab on a line of their own
	"- >+\n`\n\n",                       // a block scalar refused for its column
	"strip: >-\n\n>-ip: >\n\nkeep: \"|", // an empty block scalar leaves go-yaml's buffer looking full
	"- |\n detected\n- >\n \n\"\t\n  # detected\n- |  explicit\n",
	"--\"-\n{\n<<:  foo: 1\n bar: 2 }\n",         // a merge key drops go-yaml's saved position
	"- |+  #",                                    // a header's comment counted by its last character
	"foo:\n# a: 1\n  \tb: 2\n",                   // a tab after indentation, after a comment
	"key: \"a\tb\tc\" d\ne: [[[[",                // tabs in double quotes skip characters after them
	"a: |2\n x\n  [[[[",                          // a block scalar refused for its indentation
	"a: \"\\u12\" [[[[\nb: [[[[",                 // a short escape ends the scalar early
	"a: 'b\n--- [[[['",                           // a document marker inside quotes
	"\t---\na: >\n  b c, \n :key: f]\n  }\n ]\n", // a block scalar ends go-yaml's saved position
	"a: |+-0\n  x\n [[[[",                        // "-0" is an indentation indicator go-yaml takes
}

// bestTimes is the best of n parses of src and of baseline, in turns.
func bestTimes(src, baseline []byte, n int) (time.Duration, time.Duration) {
	best, bestBaseline := time.Hour, time.Hour
	for range n {
		bestBaseline = min(bestBaseline, parseCost(baseline).d)
		best = min(best, parseCost(src).d)
	}
	return best, bestBaseline
}
