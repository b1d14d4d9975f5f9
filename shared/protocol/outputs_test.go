package protocol

import (
	"strings"
	"testing"
)

// TestOutputsValidate: names as the pipeline's, text values (no NUL),
// and the limits of names and bytes, each a clear error.
func TestOutputsValidate(t *testing.T) {
	many := map[string]string{}
	for i := range MaxJobOutputs + 1 {
		many["o"+strings.Repeat("x", i)] = ""
	}
	for _, tc := range []struct {
		outputs map[string]string
		want    string
	}{
		{map[string]string{"version": "1.2.3", "multi_line-2": "a\nb"}, ""},
		{nil, "field outputs is required"},
		{map[string]string{"1x": "y"}, `output name "1x"`},
		{map[string]string{"x": "a\x00b"}, "NUL"},
		{many, "over the limit of 100"},
		{map[string]string{"big": strings.Repeat("y", MaxJobOutputBytes)}, "over the limit of 1048576"},
	} {
		err := (&OutputsRequest{Outputs: tc.outputs}).Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%.40v: %v, want %q", tc.outputs, err, tc.want)
		}
	}
}
