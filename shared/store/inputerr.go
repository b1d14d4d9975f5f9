package store

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forgeci/forgeci/shared/domain"
)

// PostgreSQL's text holds no NUL byte and only valid UTF-8 (the database's
// encoding): a value that does not is refused by the statement, so it
// must be refused, as the client's mistake, before it gets there.

// CheckText refuses s, named what in the message, if PostgreSQL could not
// store it: a NUL byte or bytes that are not UTF-8.
func CheckText(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return domain.Errorf(domain.EInvalid, "%s holds a NUL byte (%%00, \\u0000), which text may not hold", what)
	}
	if !utf8.ValidString(s) {
		return domain.Errorf(domain.EInvalid, "%s is not valid UTF-8", what)
	}
	return nil
}

// InputError is the client's error that err is when PostgreSQL refused a
// value's characters, nil for any other error. It is a safety net for a
// value that reached a statement unchecked. Only the codes that name a
// value's bytes are mapped: 22P02 (invalid text representation) and the
// datetime codes also come from the server's own casts, where they are
// bugs that must stay 500 (the cursors' times are checked before).
func InputError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	switch pe.Code {
	case "22021": // character_not_in_repertoire: a NUL byte, or not UTF-8
		return domain.Errorf(domain.EInvalid, "a value holds a NUL byte or is not valid UTF-8, which text may not")
	case "22P05": // untranslatable_character: \u0000 in JSON stored as jsonb
		return domain.Errorf(domain.EInvalid, "a value holds a character that cannot be stored (\\u0000 in JSON)")
	}
	return nil
}
