package domain

import (
	"regexp"
	"sync"
)

// LazyRegexp compiles expr on first use. Package-level regular expressions
// are compiled at process start otherwise, and a bounded repetition such as
// {0,199} compiles into hundreds of instructions: together they cost a
// Lambda bootstrap about 10 ms of every cold start, most of them for
// expressions its function never evaluates.
func LazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
