package pipeline

import (
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/token"
)

// Hooks for the external tests.

// PrescanTokens is prescan's count of the tokens go-yaml's lexer makes of
// src, and its refusal, if any.
func PrescanTokens(src []byte) (int, error) {
	n, err := prescan("f.yml", src)
	if err != nil {
		return n, err
	}
	return n, nil
}

// Costs is what checkTokens counts of go-yaml's parser work on src, and
// what it allows.
type Costs struct {
	Tokens, Paths, Copies, Shifts             int
	MaxTokens, MaxPaths, MaxCopies, MaxShifts int
}

func TokenCosts(src []byte) (Costs, error) {
	tks := lexer.Tokenize(string(src))
	c := &tokenCheck{file: "f.yml", size: max(len(src), minBudgetBytes)}
	for _, t := range tks {
		if t.Type != token.CommentType {
			c.toks = append(c.toks, t)
		}
	}
	for k, t := range c.toks {
		if err := c.token(k, t); err != nil {
			return Costs{}, err
		}
	}
	return Costs{len(tks), c.paths, c.copies, c.shifts,
		MaxNodes, pathBytesPerByte * c.size, keyCopiesPerByte * c.size, nullShiftsPerByte * c.size}, nil
}
