package store

import (
	"strings"
	"unicode"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/expr"
)

// MaxRunName bounds a run's name in bytes, as the pipeline's run-name makes
// it (pipeline.MaxRunName characters of ASCII).
const MaxRunName = 800

// runNameOf evaluates the pipeline's run-name with the run's facts (its
// number included), as GitHub's: the name is one line of text (a control
// or format character, such as a bidi override, shows as U+FFFD), at most
// MaxRunName bytes. An expression that
// cannot be evaluated is the run's error, as a concurrency group's.
func runNameOf(run *Run, template string) error {
	if template == "" {
		return nil
	}
	facts, _ := expr.FromGo(runFacts(run)).(map[string]any)
	vars := factContexts(facts)
	name, err := evalTemplate(template, vars, nil)
	if err != nil {
		return domain.Errorf(domain.EInvalid, "run-name: %v", err)
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '\uFFFD' // a bidi override would reorder what is shown
		}
		return r
	}, strings.ToValidUTF8(name, "\uFFFD"))
	run.RunName = domain.Truncate(strings.TrimSpace(name), MaxRunName)
	return nil
}
