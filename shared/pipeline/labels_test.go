package pipeline_test

import (
	"testing"

	"github.com/forgeci/forgeci/shared/pipeline"
)

// TestRunsOnLabelsAsTheStore: the labels a job runs on are checked as
// the store checks them when the run is made, once a matrix's values are
// in, located at runs-on: none twice, at most 32, each valid. A label the
// run fills in (vars, inputs) is left for then.
func TestRunsOnLabelsAsTheStore(t *testing.T) {
	refuses(t, "jobs:\n  a:\n    %s\n    steps: [{run: x}]\n", map[string]string{
		"runs-on: [linux, linux]": `jobs.a.runs-on: job "a": label "linux" is repeated`,
		"runs-on: [l0, l1, l2, l3, l4, l5, l6, l7, l8, l9, l10, l11, l12, l13, l14, l15, l16, l17, l18, l19, l20, l21, l22, l23, l24, l25, l26, l27, l28, l29, l30, l31, l32]": "at most 32 labels are allowed",
		"strategy: {matrix: {os: ['bad label', ok]}}\n    runs-on: ${{ matrix.os }}":                                                                                           `job "a (bad label)": label "bad label" is not valid`,
		"strategy: {matrix: {os: [linux]}}\n    runs-on: [linux, '${{ matrix.os }}']":                                                                                          `label "linux" is repeated`,
	})
	if _, err := pipeline.Parse("f.yml", []byte("jobs:\n  a:\n    runs-on: [linux, '${{ vars.POOL }}', '${{ vars.POOL }}']\n    steps: [{run: x}]\n")); err != nil {
		t.Fatalf("labels the run fills in: %v", err)
	}
}
