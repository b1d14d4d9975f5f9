// Package pipelinetest builds pipeline files for tests and benchmarks:
// realistic pipelines of a chosen size, full of brackets, braces, quotes
// and comments inside scripts and strings, and an adversarial corpus of
// the shapes that cost go-yaml super-linear time or memory.
package pipelinetest

import (
	"fmt"
	"strings"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// Realistic returns a valid pipeline of about size bytes (never more):
// jobs with needs, labels, env, matrices, artifacts and caches, and steps
// whose run scripts hold [[ ]], { }, quotes and # in block scalars,
// quoted strings and plain scalars.
func Realistic(size int) []byte {
	var b strings.Builder
	b.WriteString("# ForgeCI pipeline [generated]: {brackets} in comments are text\n")
	b.WriteString("name: realistic [${{ matrix.go }}]\n")
	b.WriteString("env:\n  GOFLAGS: -mod=readonly\n  GREETING: \"hello [world] {x}\"\n  PATTERN: '[a-z]+{2}'\n")
	b.WriteString("jobs:\n")
	header := b.Len()
	for i := 0; ; i++ {
		job := realisticJob(i)
		if b.Len()+len(job) > size && i > 0 {
			break
		}
		if b.Len() == header && b.Len()+len(job) > size {
			// Too small for even one job: return the smallest valid pipeline.
			return []byte("jobs:\n  a:\n    steps: [{run: x}]\n")
		}
		b.WriteString(job)
	}
	return []byte(b.String())
}

// realisticJob is one job of about 1.5 KB; job i needs job i-1 and every
// third job is a matrix of two.
func realisticJob(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  build-%d:\n", i)
	fmt.Fprintf(&b, "    runs-on: [linux, amd64]\n")
	if i > 0 {
		fmt.Fprintf(&b, "    needs: [build-%d]\n", i-1)
	}
	b.WriteString("    timeout-minutes: 30\n")
	b.WriteString("    env:\n      CGO_ENABLED: \"0\"\n      TARGET: linux/amd64 # comment with [[ brackets ]]\n")
	matrix := i%3 == 0
	if matrix {
		b.WriteString("    strategy:\n      matrix:\n        go: [\"1.22\", \"1.23\"]\n")
	}
	b.WriteString("    steps:\n")
	b.WriteString("      - name: Check out tools [cache]\n")
	b.WriteString("        run: echo \"fetching {tools}\" && ls -la [abc]* && test [[ -d x ]]\n")
	b.WriteString("      - name: Build\n        run: |\n")
	b.WriteString("          set -euo pipefail\n")
	b.WriteString("          if [[ -f go.mod ]]; then\n")
	if matrix {
		b.WriteString("            go build -o \"bin/${{ matrix.go }}/app\" ./... # [[ nested ]]\n")
	} else {
		b.WriteString("            go build -o bin/app ./... # [[ nested ]]\n")
	}
	b.WriteString("          fi\n")
	b.WriteString("          for f in {a,b,c}; do echo \"[$f]\"; done\n")
	b.WriteString("          jq '.items[] | {name: .name, tags: [.tags[]]}' data.json > out.json\n")
	b.WriteString("          echo '[[[{{{ not yaml }}}]]]' - key: value\n")
	b.WriteString("      - run: 'echo ''single [quoted] {x}'' # not a comment'\n")
	b.WriteString("      - name: \"Test [unit] {fast}\"\n")
	b.WriteString("        run: make test ARGS=\"-run 'Test[A-Z]+' -count=1\" # [x]\n")
	b.WriteString("        env: {LEVEL: step, FILTER: \"[{}]\"}\n")
	b.WriteString("      - name: Report\n        run: >-\n")
	b.WriteString("          echo report [done] {ok}\n          && cat out.json | jq '.[0]'\n")
	fmt.Fprintf(&b, "    artifacts: [{name: bin-%d, paths: [bin/]}]\n", i)
	fmt.Fprintf(&b, "    cache: {key: \"go-%d\", restore-keys: [go-], paths: [.cache/go]}\n", i)
	return b.String()
}

// Case is one adversarial input.
type Case struct {
	Name string
	Src  []byte
}

// Adversarial returns inputs of size bytes or a little less (under 16 KiB
// a few shapes need more) in the shapes that make go-yaml's lexer or
// parser super-linear, and in shapes that sit just inside each of the
// bounded parser's budgets, padded to size with a comment: the costliest
// files a bounded parser still reads.
func Adversarial(size int) []Case {
	fill := func(prefix, unit, suffix string) []byte {
		n := (size - len(prefix) - len(suffix)) / len(unit)
		return []byte(prefix + strings.Repeat(unit, max(n, 0)) + suffix)
	}
	nodes := pipeline.MaxNodes - 100 // room for the rest of the file
	return []Case{
		{"nested [", fill("jobs: ", "[", "")},
		{"nested [ closed", nestedClosed(size)},
		{"nested {", fill("jobs: ", "{a: ", "")},
		{"nested [a:", fill("jobs: ", "[a: ", "")},
		{"deep block maps", deepBlockMap(size)},
		{"deep block sequences", fill("jobs:\n", "- ", "x\n")},
		{"flat flow list", fill("jobs: [", "a,", "a]\n")},
		{"flow map of null keys", fill("jobs: {", "k,", "k}\n")},
		{"block list of nulls", fill("jobs:\n", "-\n", "- x\n")},
		{"many keys", manyKeys(size, size)},
		{"long key with children", longKey(size)},
		{"long plain scalar", fill("jobs: ", "a", "\n")},
		{"long double-quoted", fill("jobs: \"", `a\"`, "\"\n")},
		{"long single-quoted", fill("jobs: '", "a''", "'\n")},
		{"tabs in double quotes", fill("jobs: \"", "\ta", "\"\n")},
		{"run of <", fill("jobs: a", "<", "\n")},
		{"block scalar of brackets", fill("jobs: |\n", "  [[[{{{\n", "")},
		{"blank lines after block scalar", blankTail(size, size)},
		{"documents", fill("", "---\na: b\n", "")},
		{"comments", fill("jobs: a\n", "#[\n", "")},
		{"anchors", fill("jobs: [", "&a a,", "a]\n")},
		{"aliases", fill("x: &a a\njobs: [", "*a,", "a]\n")},
		{"tags", fill("jobs: [", "!!str a,", "a]\n")},
		// Just inside the budgets:
		{"flow list at the node limit", pad(upTo(size, nodes, "jobs: [", "a,", 2, "a]\n"), size)},
		{"block list at the node limit", pad(upTo(size, nodes, "jobs:\n", "- a\n", 2, ""), size)},
		{"flow maps at the node limit", pad(upTo(size, nodes, "jobs: [", "{a: b},", 6, "{}]\n"), size)},
		{"keys at the node limit", pad(keyLists(100, min(nodes/3, size/11)), size)},
		{"anchors at the node limit", pad(upTo(size, nodes, "jobs: [", "&a a,", 4, "a]\n"), size)},
		{"tags at the node limit", pad(upTo(size, nodes, "jobs: [", "!!str a,", 3, "a]\n"), size)},
		{"comments at the node limit", pad(upTo(size, nodes, "jobs: a\n", "#\n", 1, ""), size)},
		{"nesting at the depth limit", pad(deepList(pipeline.MaxDepth-2, min(nodes, size/2-100)/2), size)},
		{"long key paths", pad(longPaths(16, 40, min(32*max(size, 32<<10)*9/10/(16*43+20), size/2-1000)), size)},
		{"block mapping of 1400 keys", pad(manyKeys(size, 14000), size)},
		{"empty values", pad(emptyValues(size, min(nodes-300, size/2-100)), size)},
		{"blank lines at the limit", blankTail(size, size/2)},
		{"tabs in quotes at the limit", pad(tabLines(size), size)},
		{"runs of 256 <", fill("jobs: a", strings.Repeat("<", 256)+"a", "\n")},
		{"all budgets at once", pad(allBudgets(size), size)},
	}
}

// allBudgets spends, in one valid YAML document, about all of the bounded
// parser's budgets for a file of size bytes (its per-byte allowances for
// empty values, key paths and block mapping keys: 32, 32 and 4, counted
// for at least 32 KiB), then fills it with list items up to the node
// limit or the size.
func allBudgets(size int) []byte {
	budget := max(size, 32<<10) * 9 / 10
	keys := 1
	for (keys+1)*keys/2 < 4*budget {
		keys++
	}
	depth, keyLen := 10, 60
	items := 32 * budget / (depth*(keyLen+3) + 20)
	var keysPart, pathPart strings.Builder
	for i := 0; i < keys; i++ {
		fmt.Fprintf(&keysPart, "    k%d: v\n", i)
	}
	pathPart.WriteString("  p:\n")
	for d := 1; d <= depth; d++ {
		fmt.Fprintf(&pathPart, "%s%s:\n", strings.Repeat(" ", d+2), strings.Repeat(string(rune('a'+d)), keyLen))
	}
	fmt.Fprintf(&pathPart, "%s[%sa]\n  k:\n", strings.Repeat(" ", depth+3), strings.Repeat("a,", items))
	tokens := min(pipeline.MaxNodes-200-2*items-3*keys-4*depth, (size-keysPart.Len()-pathPart.Len())/2)
	nulls := 32 * budget / max(tokens+2*items+3*keys, 1)
	rest := (tokens - nulls) / 2
	return []byte("jobs:\n  e:\n" + strings.Repeat("  -\n", nulls) + "  - [" + strings.Repeat("a,", max(rest, 0)) + "a]\n" +
		pathPart.String() + keysPart.String())
}

// keyLists is a list of block mappings of perMap keys, keys in all.
func keyLists(perMap, keys int) []byte {
	var b strings.Builder
	b.WriteString("jobs:\n")
	for i := 0; i < keys; i++ {
		lead := "  "
		if i%perMap == 0 {
			lead = "- "
		}
		fmt.Fprintf(&b, "%sk%d: v\n", lead, i%perMap)
	}
	return []byte(b.String())
}

// upTo is prefix, then as many units as fit in size bytes and hold at
// most nodes tokens (perUnit each), then suffix.
func upTo(size, nodes int, prefix, unit string, perUnit int, suffix string) []byte {
	n := min(nodes/perUnit, (size-len(prefix)-len(suffix)-3)/len(unit))
	return []byte(prefix + strings.Repeat(unit, max(n, 0)) + suffix)
}

// pad fills b to size bytes with a comment, if it is shorter.
func pad(b []byte, size int) []byte {
	if len(b)+3 > size {
		return b
	}
	return append(append(b, "\n#"...), strings.Repeat("x", size-len(b)-2)...)
}

// deepList is depth nested lists holding n items at the bottom.
func deepList(depth, n int) []byte {
	return []byte("jobs: " + strings.Repeat("[", depth) + strings.Repeat("a,", n) + "a" + strings.Repeat("]", depth) + "\n")
}

// longPaths is depth nested keys of keyLen bytes over a list of n items,
// each item's path as long as all the keys.
func longPaths(depth, keyLen, n int) []byte {
	var b strings.Builder
	b.WriteString("jobs:\n")
	for d := 1; d <= depth; d++ {
		fmt.Fprintf(&b, "%s%s:\n", strings.Repeat(" ", d), strings.Repeat(string(rune('a'+d%26)), keyLen))
	}
	fmt.Fprintf(&b, "%s[%sa]\n", strings.Repeat(" ", depth+1), strings.Repeat("a,", n))
	return []byte(b.String())
}

// emptyValues is empty list items before a list of tokens items, as many
// as the bounded parser's budget allows (32 moves per byte): each empty
// value moves every token after it in go-yaml's parser.
func emptyValues(size, tokens int) []byte {
	n := 32 * max(size, 32<<10) * 9 / 10 / max(tokens, 1)
	return []byte("jobs:\n" + strings.Repeat("-\n", n) + "- [" + strings.Repeat("a,", tokens/2) + "a]\n")
}

// tabLines is a double-quoted scalar of lines that hold as many tabs as
// the bounded parser allows (64 times the size, tabs times line length).
func tabLines(size int) []byte {
	length := 4096
	lines := max(size/2/length, 1)
	tabs := min(64*max(size, 32<<10)*9/10/lines/length, length/2)
	line := strings.Repeat("\ta", tabs) + strings.Repeat("b", length-2*tabs)
	return []byte("jobs: \"" + strings.Repeat(line+"\n  ", lines) + "\"\n")
}

func nestedClosed(size int) []byte {
	n := (size - len("jobs: ")) / 2
	return []byte("jobs: " + strings.Repeat("[", n) + strings.Repeat("]", n))
}

func deepBlockMap(size int) []byte {
	var b strings.Builder
	b.WriteString("jobs:\n")
	for d := 1; b.Len()+d+3 <= size; d++ {
		b.WriteString(strings.Repeat(" ", d) + "a:\n")
	}
	return []byte(b.String())
}

// manyKeys is one block mapping of keys "kN: v" filling n bytes, within
// size.
func manyKeys(size, n int) []byte {
	var b strings.Builder
	b.WriteString("jobs:\n")
	for i := 0; ; i++ {
		line := fmt.Sprintf("  k%d: v\n", i)
		if b.Len()+len(line) > min(size, n) {
			break
		}
		b.WriteString(line)
	}
	return []byte(b.String())
}

func longKey(size int) []byte {
	key := strings.Repeat("k", size/2)
	var b strings.Builder
	b.WriteString("jobs:\n  " + key + ":\n")
	for b.Len()+8 <= size {
		b.WriteString("    - a\n")
	}
	return []byte(b.String())
}

// blankTail is a block scalar of about at bytes, then blank lines to size
// (the most go-yaml's trailing-blank-line work allows there, when at is
// half the size), then a key.
func blankTail(size, at int) []byte {
	head := "jobs: |\n" + strings.Repeat("  x\n", max(at-16, 0)/4)
	tail := "k: v\n"
	blanks := max(size-len(head)-len(tail), 0)
	if at < size {
		blanks = min(blanks, 16*max(size, 32<<10)/len(head)-1)
	}
	return pad([]byte(head+strings.Repeat("\n", blanks)+tail), size)
}
