package store

import (
	"slices"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
)

func isTemplate(s string) bool { return strings.Contains(s, "${{") }

// jobLabels are a job's runs-on, each ${{ }} evaluated with the run's
// facts, inputs and variables, as GitHub's (runs-on: ${{ vars.RUNNER }}):
// a label so made is checked as a written one; one made empty is
// dropped, and a job left with none is refused.
func jobLabels(run *Run, j NewJob) ([]string, error) {
	if !slices.ContainsFunc(j.Labels, isTemplate) {
		return j.Labels, nil
	}
	vars := runContexts(run)
	out := make([]string, 0, len(j.Labels))
	for _, l := range j.Labels {
		if isTemplate(l) {
			v, err := evalTemplate(l, vars, nil)
			if err != nil {
				return nil, domain.Errorf(domain.EInvalid, "job %s: runs-on: %v", j.Name, err)
			}
			if l = strings.TrimSpace(v); l == "" {
				continue
			}
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, domain.Errorf(domain.EInvalid, "job %s: runs-on made no label (%v)", j.Name, j.Labels)
	}
	if err := domain.ValidateLabels(out); err != nil {
		return nil, domain.Errorf(domain.EInvalid, "job %s: runs-on: %v", j.Name, err)
	}
	return out, nil
}
