package domain

import "strings"

// The checks below are the runner routes' and the CAS's, on the path of a
// Lambda function's first event: written as loops, since compiling the
// regular expressions they replace (a class with a bounded repetition,
// {0,63}) cost that first event about 0.3 ms of CPU.

// OnlyChars reports whether every byte of s is an ASCII letter, an ASCII
// digit or one of extra (ASCII).
func OnlyChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		if !alnum(s[i]) && strings.IndexByte(extra, s[i]) < 0 {
			return false
		}
	}
	return true
}

// ValidLabel reports whether l is a runner or job label: 1 to 64 letters,
// digits and . _ : / -, starting with a letter or digit.
func ValidLabel(l string) bool {
	return len(l) >= 1 && len(l) <= 64 && alnum(l[0]) && OnlyChars(l, "._:/-")
}

// LowerHex reports whether s is n lowercase hexadecimal digits.
func LowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
