package agent

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
)

// MaxOutputs bounds how many outputs a step may set.
const MaxOutputs = 100

// parseOutputs reads a step's $FORGECI_OUTPUT in GitHub's $GITHUB_OUTPUT
// format (parseAssignments), names as outputs are named.
func parseOutputs(data []byte) (map[string]string, error) {
	return parseAssignments(data, domain.OutputNameRE().MatchString, MaxOutputs)
}

// parseAssignments reads lines NAME=value, or NAME<<DELIMITER, the
// value's lines, and DELIMITER alone on a line, as GitHub's step files
// hold them; each name must pass valid, and at most limit (-1: any number)
// are set. A later value of a name replaces an earlier.
func parseAssignments(data []byte, valid func(string) bool, limit int) (map[string]string, error) {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, fmt.Errorf("byte %d is NUL: the file is text", i)
	}
	out := map[string]string{}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if line == "" {
			continue
		}
		name, value, ok, at := "", "", false, i+1
		if n, delim, heredoc := strings.Cut(line, "<<"); heredoc && !strings.Contains(n, "=") {
			name = n
			if delim == "" {
				return nil, fmt.Errorf("line %d: %s<< has no delimiter", at, n)
			}
			end := -1
			for k := i + 1; k < len(lines); k++ {
				if lines[k] == delim {
					end = k
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("line %d: %s<<%s is not closed by a line %q", at, n, delim, delim)
			}
			value, i, ok = strings.Join(lines[i+1:end], "\n"), end, true
		} else {
			name, value, ok = strings.Cut(line, "=")
		}
		if !ok {
			return nil, fmt.Errorf("line %d is not NAME=value or NAME<<DELIMITER", at)
		}
		if !valid(name) {
			return nil, fmt.Errorf("line %d: %q is not a valid name", at, name)
		}
		out[name] = value
		if limit >= 0 && len(out) > limit {
			return nil, fmt.Errorf("more than %d names set", limit)
		}
	}
	return out, nil
}
