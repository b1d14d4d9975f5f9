package pipeline

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/forgeci/forgeci/shared/domain"
)

// A filter is a list of GitHub's filter patterns (branches, tags, paths):
// `*` any characters but `/`, `**` any characters (`**/` also none), `?`
// zero or one of the
// character before, `+` one or more of it, `[...]` one of a class, `\`
// escapes, and a leading `!` excludes what the patterns before included.
// The last pattern that matches decides.
type filter struct {
	patterns []pattern
}

type pattern struct {
	negate bool
	re     *regexp.Regexp
	text   string
}

// classRE is what a [class] may hold: letters, digits, . and _, and
// ranges of them (never ^, which would make it match /).
var classRE = domain.LazyRegexp(`^[A-Za-z0-9._]([A-Za-z0-9._-]*[A-Za-z0-9._])?$`)

// compileFilter compiles patterns, or says what is wrong with one; a
// filter needs a pattern, and one that is not a ! pattern (which alone
// would match nothing).
func compileFilter(patterns []string) (filter, error) {
	var f filter
	if len(patterns) == 0 {
		return f, fmt.Errorf("a filter needs at least one pattern")
	}
	positive := false
	for _, p := range patterns {
		positive = positive || !strings.HasPrefix(p, "!")
	}
	if !positive {
		return f, fmt.Errorf("a filter of ! patterns only matches nothing: add what to take first (for example '**')")
	}
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		re, err := globRegexp(strings.TrimPrefix(p, "!"))
		if err != nil {
			return f, fmt.Errorf("pattern %q: %v", p, err)
		}
		f.patterns = append(f.patterns, pattern{negate: neg, re: re, text: p})
	}
	return f, nil
}

// matches reports whether name is in the filter: matched by a pattern
// and not excluded by a ! pattern after it.
func (f filter) matches(name string) bool {
	in := false
	for _, p := range f.patterns {
		if p.re.MatchString(name) {
			in = !p.negate
		}
	}
	return in
}

// globRegexp translates one of GitHub's filter patterns.
func globRegexp(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, fmt.Errorf("empty")
	}
	if !utf8.ValidString(p) {
		return nil, fmt.Errorf("not UTF-8 text")
	}
	var b strings.Builder
	b.WriteString("^")
	repeatable := false // the last piece was one character or a class: ? and + may follow
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '*':
			switch {
			case strings.HasPrefix(p[i:], "**/") && (i == 0 || p[i-1] == '/'):
				// Zero or more directories: **/README.md is README.md too.
				b.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				b.WriteString(".*")
				i++
			default:
				b.WriteString("[^/]*")
			}
		case '?', '+':
			if !repeatable {
				return nil, fmt.Errorf("%c must follow a character or a [class]", c)
			}
			b.WriteByte(c)
		case '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 2 {
				return nil, fmt.Errorf("[ without a class and a ]")
			}
			class := p[i+1 : i+end]
			if !classRE().MatchString(class) {
				return nil, fmt.Errorf("a [class] holds letters, digits, . _ and ranges such as a-z")
			}
			b.WriteString("[" + class + "]")
			i += end
		case '\\':
			if i+1 == len(p) {
				return nil, fmt.Errorf("\\ at the end")
			}
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
		repeatable = c != '*' && c != '?' && c != '+'
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
