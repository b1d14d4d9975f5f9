// Package junit reads JUnit XML test reports (the format JUnit, pytest,
// go-junit-report, Jest and most test runners write) into a summary:
// counts, and each failure with its message and, where the report says,
// its file and line. It reads hostile input in bounded time and memory:
// a streaming decoder, no DTDs or entities beyond XML's own, a depth
// limit, and bounded text kept per failure.
package junit

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/forgeci/forgeci/shared/domain"
)

// Limits of one report.
const (
	MaxReportBytes = 8 << 20 // read from a file
	maxDepth       = 32      // nested testsuites
	maxFailures    = 1000    // kept with their text (all are counted)
	maxTextBytes   = 4 << 10 // of a failure's message and text each
)

// Report is what a report says.
type Report struct {
	Tests, Passed, Failed, Errored, Skipped int
	// Seconds is the sum of the test cases' times.
	Seconds  float64
	Failures []Failure
	// Truncated: more failures than maxFailures; the rest are counted
	// only.
	Truncated bool
}

// Failure is a test case that failed or errored.
type Failure struct {
	Suite, Class, Name string
	Kind               string // failure or error
	Message, Text      string
	File               string
	Line               int
}

// ErrNotJUnit is a document whose root is neither testsuites nor testsuite.
var ErrNotJUnit = errors.New("not a JUnit report: the root is neither <testsuites> nor <testsuite>")

// Parse reads one report of at most MaxReportBytes.
func Parse(r io.Reader) (*Report, error) {
	lr := &io.LimitedReader{R: r, N: MaxReportBytes + 1}
	d := xml.NewDecoder(lr)
	d.Strict = true
	p := &parser{d: d, rep: &Report{}}
	if err := p.document(); err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("the report is over %d bytes", MaxReportBytes)
		}
		return nil, err
	}
	return p.rep, nil
}

type parser struct {
	d     *xml.Decoder
	rep   *Report
	depth int
}

// document finds the root element and reads it.
func (p *parser) document() error {
	for {
		tok, err := p.d.Token()
		if err != nil {
			if err == io.EOF {
				return ErrNotJUnit
			}
			return fmt.Errorf("XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "testsuites":
				return p.suites(t)
			case "testsuite":
				return p.suite(t)
			}
			return ErrNotJUnit
		case xml.Directive:
			return errors.New("XML: a DTD or other directive is not read")
		}
	}
}

// suites reads <testsuites>: testsuite elements (and nested testsuites).
func (p *parser) suites(start xml.StartElement) error {
	return p.children(start, func(t xml.StartElement) error {
		switch t.Name.Local {
		case "testsuite":
			return p.suite(t)
		case "testsuites":
			return p.suites(t)
		}
		return p.d.Skip()
	})
}

// suite reads <testsuite>: testcase elements, and nested testsuites.
func (p *parser) suite(start xml.StartElement) error {
	name := attr(start, "name")
	return p.children(start, func(t xml.StartElement) error {
		switch t.Name.Local {
		case "testcase":
			return p.testcase(name, t)
		case "testsuite":
			return p.suite(t)
		}
		return p.d.Skip()
	})
}

// children calls each for every child element of start, until its end,
// within the depth limit.
func (p *parser) children(start xml.StartElement, each func(xml.StartElement) error) error {
	if p.depth++; p.depth > maxDepth {
		return fmt.Errorf("suites nest deeper than %d", maxDepth)
	}
	defer func() { p.depth-- }()
	for {
		tok, err := p.d.Token()
		if err != nil {
			return fmt.Errorf("XML: inside <%s>: %w", start.Name.Local, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if err := each(t); err != nil {
				return err
			}
		case xml.EndElement:
			return nil
		case xml.Directive:
			return errors.New("XML: a DTD or other directive is not read")
		}
	}
}

// testcase reads one <testcase>: passed unless it holds failure, error
// or skipped.
func (p *parser) testcase(suite string, start xml.StartElement) error {
	f := Failure{Suite: suite, Class: attr(start, "classname"), Name: attr(start, "name"), File: attr(start, "file")}
	f.Line, _ = strconv.Atoi(attr(start, "line"))
	if secs, err := strconv.ParseFloat(attr(start, "time"), 64); err == nil && secs >= 0 && secs < 1e9 {
		p.rep.Seconds += secs
	}
	outcome := "passed"
	err := p.children(start, func(t xml.StartElement) error {
		switch t.Name.Local {
		case "failure", "error":
			if outcome == "passed" || outcome == "skipped" {
				outcome, f.Kind, f.Message = t.Name.Local, t.Name.Local, bounded(attr(t, "message"))
				text, err := p.text()
				f.Text = bounded(text)
				return err
			}
		case "skipped":
			if outcome == "passed" {
				outcome = "skipped"
			}
		}
		return p.d.Skip()
	})
	if err != nil {
		return err
	}
	p.rep.Tests++
	switch outcome {
	case "passed":
		p.rep.Passed++
	case "skipped":
		p.rep.Skipped++
	default:
		if outcome == "failure" {
			p.rep.Failed++
		} else {
			p.rep.Errored++
		}
		if len(p.rep.Failures) < maxFailures {
			p.rep.Failures = append(p.rep.Failures, f)
		} else {
			p.rep.Truncated = true
		}
	}
	return nil
}

// text reads an element's character data up to its end (keeping at most
// maxTextBytes+4 of it), skipping child elements.
func (p *parser) text() (string, error) {
	var b strings.Builder
	for {
		tok, err := p.d.Token()
		if err != nil {
			return "", fmt.Errorf("XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if b.Len() <= maxTextBytes {
				b.Write(t[:min(len(t), maxTextBytes+4-b.Len())])
			}
		case xml.StartElement:
			if err := p.d.Skip(); err != nil {
				return "", err
			}
		case xml.EndElement:
			return b.String(), nil
		}
	}
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return bounded(a.Value)
		}
	}
	return ""
}

// bounded is s cut to maxTextBytes on a character boundary, trimmed.
func bounded(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= maxTextBytes {
		return s
	}
	return domain.Truncate(s, maxTextBytes) + "…"
}
