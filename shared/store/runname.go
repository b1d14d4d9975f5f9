package store

import (
	"context"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/domain"
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
	vars := runContexts(run)
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

// madeFrom settles what a new run's facts decide: its variables (the
// project's now, unless nr keeps a run's), its concurrency group and its
// name.
func madeFrom(ctx context.Context, tx pgx.Tx, run *Run, nr NewRun) error {
	var err error
	if run.Vars = nr.Vars; run.Vars == nil && !nr.Untrusted {
		if run.Vars, err = runVariables(ctx, tx, run.ProjectID); err != nil {
			return err
		}
	}
	if nr.Untrusted {
		// As GitHub gives a fork's pull request none: the project's
		// configuration is for its members, not for whoever opens one.
		run.Vars = map[string]string{}
	}
	if err := groupOf(run, nr.Concurrency); err != nil {
		return err
	}
	run.runNameSpec = nr.RunName
	return runNameOf(run, nr.RunName)
}
