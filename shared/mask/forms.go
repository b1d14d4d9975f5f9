package mask

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// MinLen is the shortest secret value, and the shortest derived pattern,
// that is masked: anything shorter would mask ordinary text too often
// (and a value that short cannot be told apart from it anyway).
const MinLen = 4

// MaxPattern is the longest pattern matched. A longer form of a secret is
// matched as overlapping pieces of this length, so that a streaming masker
// never holds back more than MaxPattern-1 bytes and a server window never
// needs more context than that, whatever the size of a secret. Any piece
// seen is masked: a long secret printed in part is masked too.
const MaxPattern = 256

// pieceOverlap is how far consecutive pieces of a long form overlap: they
// must overlap (not just touch) for a whole occurrence to merge into one
// masked span.
const pieceOverlap = 32

// Forms returns the strings to mask for one secret value: the value, each
// line of a multi-line value, its base64 (standard and URL alphabets, on
// its own and as it reads inside longer base64 at each of the three byte
// alignments, and wrapped as base64 tools print it), its URL encodings,
// its JSON string escapings and its hex.
// A value under MinLen bytes gives
// none; forms under MinLen are dropped.
func Forms(value string) []string {
	if len(value) < MinLen {
		return nil
	}
	forms := []string{value}
	if strings.Contains(value, "\n") {
		for line := range strings.SplitSeq(value, "\n") {
			forms = append(forms, strings.TrimSuffix(line, "\r"))
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		// On its own, as `base64` or a JSON encoder prints it.
		forms = append(forms, enc.EncodeToString([]byte(value)), enc.WithPadding(base64.NoPadding).EncodeToString([]byte(value)))
		for k := range 3 {
			forms = append(forms, inner(enc, value, k))
		}
		forms = append(forms, wrapped(enc, value)...)
	}
	forms = append(forms, url.QueryEscape(value), url.PathEscape(value))
	forms = append(forms, jsonForms(value)...)
	forms = append(forms, hex.EncodeToString([]byte(value)), strings.ToUpper(hex.EncodeToString([]byte(value))))
	forms = slices.DeleteFunc(forms, func(f string) bool { return len(f) < MinLen })
	slices.Sort(forms)
	return slices.Compact(forms)
}

// jsonForms are the value as it reads inside a JSON string: escaped as
// encoding/json does by default (<, > and & as \u003c ...) and without
// that HTML escaping, as most other encoders do.
func jsonForms(value string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(value) == nil {
			out = append(out, strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(b.String(), `"`), "\n"), `"`))
		}
	}
	return out
}

// inner is the part of the base64 of value that does not depend on the
// bytes around it when value starts k bytes (mod 3) into a longer string:
// the characters whose 6 bits all come from value.
func inner(enc *base64.Encoding, value string, k int) string {
	text := enc.EncodeToString(append(make([]byte, k), value...))
	first := (8*k + 5) / 6           // first character after the k bytes before
	last := 8 * (k + len(value)) / 6 // characters wholly inside value end here
	return text[first:last]
}

// wrapWidths are the line lengths base64 tools wrap at: GNU base64 76,
// openssl base64 and PEM 64.
var wrapWidths = []int{64, 76}

// wrapped are the value's base64 as tools print it when the value starts
// their input (`echo "$SECRET" | base64`, a key file's PEM body): in lines
// of each wrapWidths width, ended by LF or CRLF. The forms are the value's
// padded and unpadded base64 and the part that does not depend on what
// follows it (a newline echo adds). A value that starts a line elsewhere
// in wrapped base64 is not matched (only its lines' pieces of MinLen or
// more that another form has).
func wrapped(enc *base64.Encoding, value string) []string {
	var out []string
	for _, f := range []string{enc.EncodeToString([]byte(value)), enc.WithPadding(base64.NoPadding).EncodeToString([]byte(value)), inner(enc, value, 0)} {
		for _, w := range wrapWidths {
			if len(f) <= w {
				continue
			}
			for _, nl := range []string{"\n", "\r\n"} {
				var b strings.Builder
				for lo := 0; lo < len(f); lo += w {
					if lo > 0 {
						b.WriteString(nl)
					}
					b.WriteString(f[lo:min(lo+w, len(f))])
				}
				out = append(out, b.String())
			}
		}
	}
	return out
}

// pieces cuts a form longer than MaxPattern into overlapping pieces of
// MaxPattern bytes, the last one ending where the form ends.
func pieces(form string) []string {
	if len(form) <= MaxPattern {
		return []string{form}
	}
	var out []string
	for lo := 0; ; lo += MaxPattern - pieceOverlap {
		if lo+MaxPattern >= len(form) {
			return append(out, form[len(form)-MaxPattern:])
		}
		out = append(out, form[lo:lo+MaxPattern])
	}
}
