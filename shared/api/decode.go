package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
)

// Body size limits. API Gateway caps payloads at 10 MB and Lambda at 6 MB;
// large bytes travel by presigned S3 URL, so requests stay small.
const (
	maxBody    = 64 << 10
	maxLogBody = 2 << 20 // a 1 MiB log chunk is ~1.4 MB in base64
)

// decodeJSON reads exactly one JSON object into v, refusing unknown fields,
// trailing data, strings holding NUL and bodies over limit, each with a
// clear message.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return domain.Errorf(domain.EInvalid, "Content-Type must be application/json, got %q", ct)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return decodeError(err, limit)
	}
	if err := decodeBytes(raw, limit, v); err != nil {
		return err
	}
	// Invalid UTF-8 the decoder already turned into U+FFFD.
	if at := nulEscape(raw); at >= 0 {
		return domain.Errorf(domain.EInvalid, "request body holds a NUL character (\\u0000, at byte %d) in a string, which text may not hold", at)
	}
	return nil
}

// decodeBytes decodes exactly one JSON object of raw into v.
func decodeBytes(raw []byte, limit int64, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, limit)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if err != nil {
			if de := decodeError(err, limit); domain.ErrorCode(de) == domain.ETooLarge {
				return de
			}
		}
		return domain.Errorf(domain.EInvalid, "request body must hold exactly one JSON object")
	}
	return nil
}

// nulEscape is the offset of the first \u0000 escape in raw, a valid JSON
// text, or -1. A raw NUL byte is not valid JSON, and in valid JSON every
// backslash begins an escape inside a string: reading them in turn, the
// text "\\u0000" is an escaped backslash followed by "u0000".
func nulEscape(raw []byte) int {
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 || i+j+1 >= len(raw) {
			return -1
		}
		i += j
		if bytes.HasPrefix(raw[i+1:], []byte("u0000")) {
			return i
		}
		i += 2 // the backslash and the escape's letter (\uXXXX's digits are not backslashes)
	}
	return -1
}

func decodeError(err error, limit int64) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return domain.Errorf(domain.ETooLarge, "request body is over the limit of %d bytes", limit)
	case errors.Is(err, io.EOF):
		return domain.Errorf(domain.EInvalid, "request body is empty; a JSON object is required")
	case errors.As(err, &syntaxErr):
		return domain.Errorf(domain.EInvalid, "request body is not valid JSON (at byte %d): %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return domain.Errorf(domain.EInvalid, "request body is truncated JSON")
	case errors.As(err, &typeErr):
		return domain.Errorf(domain.EInvalid, "field %s must be of JSON type %s", typeErr.Field, typeErr.Type.Kind())
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return domain.Errorf(domain.EInvalid, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return domain.Errorf(domain.EInvalid, "request body: %s", fmt.Sprint(err))
}
