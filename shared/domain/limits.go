package domain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// JobLimits are what a job asks its runner to hold it to (the pipeline's
// limits:). A runner applies, for each, the tighter of the job's and its
// own (--memory-limit, --pids-limit, --cpu-limit): a job can lower a
// runner's limit, never raise it. Zero: the job asks for none.
type JobLimits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Processes   int     `json:"processes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
}

// ParseBytes reads a size such as 512M, 4G, 1.5G or 1073741824 (K, M, G
// and T are powers of 1024).
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	if n := len(s); n > 0 {
		switch strings.ToUpper(s[n-1:]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		case "T":
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	// (Written so that NaN fails every test.)
	if err != nil || !(v > 0 && v*mult <= 1<<60) || (mult == 1 && v != float64(int64(v))) {
		return 0, fmt.Errorf("not a size such as 512M, 4G or a number of bytes")
	}
	return int64(v * mult), nil
}

// OutputNameRE is an output's name: a step's ($FORGECI_OUTPUT), a job's
// (outputs:), as the outputs route takes them.
var OutputNameRE = LazyRegexp(`^[A-Za-z_][A-Za-z0-9_-]{0,99}$`)

// Limits of a job's outputs: names, and bytes of names and values, of all
// an attempt sends to the outputs route together.
const (
	MaxJobOutputs     = 100
	MaxJobOutputBytes = 1 << 20
)

// PlainText reports whether s is valid UTF-8 without control characters
// (text the database stores and pages show as one line).
func PlainText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// ShowInput is a manual run's input value as people reading it before a
// deployment see it: a string quoted, with every character that is not
// printable (controls, format characters such as bidi overrides and
// zero-width joiners, spaces other than ASCII's) escaped, so what is
// shown is what the steps get; a boolean or a number as JSON.
func ShowInput(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return strconv.Quote(fmt.Sprint(v))
	}
	return string(b)
}
