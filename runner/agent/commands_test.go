package agent

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// filtered runs input through a commandFilter in the given chunks and
// returns the output and the values it asked to mask.
func filtered(input []byte, chunks []int) (string, []string) {
	var out bytes.Buffer
	var masked []string
	f := newCommandFilter(&out, func(v string) error {
		if v == "refuse-me" {
			return fmt.Errorf("refused")
		}
		masked = append(masked, v)
		return nil
	}, func() { masked = append(masked, "(refused)") })
	for _, n := range chunks {
		n = min(n, len(input))
		_, _ = f.Write(input[:n])
		input = input[n:]
	}
	_, _ = f.Write(input)
	f.Flush()
	return out.String(), masked
}

// TestAddMaskCommand: each ::add-mask:: line (leading blanks allowed,
// GitHub's escapes undone, ended by LF, CR or CRLF, the last line
// unended) asks for its value and is replaced; lines that only look like
// it pass; a refusal is reported; ::stop-commands:: stops acting on the
// other commands until its token's line, never on ::add-mask::; whatever
// the writes' sizes, the output is the same.
func TestAddMaskCommand(t *testing.T) {
	long := "::add-mask::" + strings.Repeat("x", maxCommandLine) + "\n"
	in := "building\n" +
		"::add-mask::first-secret\n" +
		"progress 50%" + "\r" + "::add-mask::after-cr\rprogress 100%\r\n" +
		"  \t::add-mask::multi%0Aline%25\r\n" +
		"::add-mask:\n" +
		":: add-mask::no\n" +
		"echo ::add-mask::not-at-start\n" +
		"::add-mask::\n" +
		"::add-mask::refuse-me\n" +
		long +
		"::stop-commands::tok-1\n" +
		"::add-mask::while-stopped\n" +
		"::tok-1::\n" +
		"::add-mask::last-unended"
	want := "building\n" +
		"::add-mask::***\n" +
		"progress 50%\r::add-mask::***\nprogress 100%\r\n" +
		"::add-mask::***\n" +
		"::add-mask:\n" +
		":: add-mask::no\n" +
		"echo ::add-mask::not-at-start\n" +
		"::add-mask:: (nothing to mask)\n" +
		"::add-mask::*** (not masked: refused; the line is left out)\n" +
		fmt.Sprintf("::add-mask::*** (not masked: the line is over %d bytes; it is left out)\n", maxCommandLine) +
		"::stop-commands::tok-1\n" +
		"::add-mask::***\n" +
		"::tok-1::\n" +
		"::add-mask::***\n"
	wantMasked := []string{"first-secret", "after-cr", "multi\nline%", "(refused)", "(refused)", "while-stopped", "last-unended"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var chunks []int
		switch round {
		case 0: // one write
		case 1:
			for range len(in) {
				chunks = append(chunks, 1)
			}
		default:
			for range 40 {
				chunks = append(chunks, rng.IntN(30))
			}
		}
		out, masked := filtered([]byte(in), chunks)
		if out != want || fmt.Sprint(masked) != fmt.Sprint(wantMasked) {
			t.Fatalf("round %d: output\n%q\nwant\n%q\nmasked %q", round, out, want, masked)
		}
	}
	// A line that is plain output flows before it ends.
	var out bytes.Buffer
	f := newCommandFilter(&out, func(string) error { return nil }, func() {})
	_, _ = f.Write([]byte("downloading... 10%"))
	if out.String() != "downloading... 10%" {
		t.Fatalf("held %q", out.String())
	}
}

// TestAddMaskMasksWhatFollows: through the log, the value is masked in
// everything written after the command, in the same write too, and the
// command's line does not show it.
func TestAddMaskMasksWhatFollows(t *testing.T) {
	a := newLogAppender(nil, nil)
	f := newCommandFilter(a, a.AddMask, func() {})
	_, _ = f.Write([]byte("before\n::add-mask::s3cr3t-generated-value\nnow s3cr3t-generated"))
	_, _ = f.Write([]byte("-value and again s3cr3t-generated-value\n::add-mask::abc\n"))
	f.Flush()
	a.mu.Lock()
	_ = a.mask.Close()
	out := a.pending.String()
	a.mu.Unlock()
	if strings.Contains(out, "s3cr3t") || !strings.Contains(out, "::add-mask::***\nnow *** and again ***\n") {
		t.Fatalf("log:\n%s", out)
	}
	if !strings.Contains(out, "::add-mask::*** (not masked: a value under 4 bytes cannot be masked; the line is left out)") {
		t.Fatalf("a short value:\n%s", out)
	}
	// One value is added above; the job may add maxAddedMasks in all.
	for i := 1; i <= maxAddedMasks; i++ {
		err := a.AddMask(fmt.Sprintf("value-%04d", i))
		if (err != nil) != (i == maxAddedMasks) {
			t.Fatalf("value %d of at most %d: %v", i+1, maxAddedMasks, err)
		}
	}
	if len(a.added) != maxAddedMasks {
		t.Fatalf("%d values added, want %d", len(a.added), maxAddedMasks)
	}
	// The masked forms are what is bounded: a 20 KiB value has about 570 KB.
	b := newLogAppender(nil, nil)
	if err := b.AddMask(strings.Repeat("k", 20<<10)); err == nil || !strings.Contains(err.Error(), "bytes of masked forms") {
		t.Fatalf("a 20 KiB value: %v", err)
	}
	if err := b.AddMask("a-pem-sized-value-" + strings.Repeat("p", 3<<10)); err != nil {
		t.Fatalf("a 3 KiB value: %v", err)
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	if err := b.AddMask("after-the-end"); err == nil {
		t.Fatal("a value was added once the log was closed")
	}
}

// TestAddMaskConcurrent: adds from several steps' outputs at once are each
// masked when they return, built one at a time.
func TestAddMaskConcurrent(t *testing.T) {
	a := newLogAppender(nil, nil)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			v := fmt.Sprintf("concurrent-value-%02d", i)
			if err := a.AddMask(v); err != nil {
				t.Error(err)
			}
			_, _ = a.Write([]byte("printed " + v + "\n"))
		})
	}
	wg.Wait()
	a.mu.Lock()
	_ = a.mask.Close()
	out := a.pending.String()
	a.mu.Unlock()
	if strings.Contains(out, "concurrent-value") || strings.Count(out, "printed ***\n") != 20 {
		t.Fatalf("log:\n%s", out)
	}
}

// FuzzCommandFilter: any output is filtered the same whatever its
// writes' sizes, within a second and 32 MB for 64 KiB, and no
// ::add-mask:: line reaches the log with its value.
func FuzzCommandFilter(f *testing.F) {
	f.Add([]byte("a\n::add-mask::secret\nb"), uint8(3))
	f.Add([]byte(" \t::add-mask::x%0Ay\r\n::add-mask:"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		if len(data) > 128<<10 {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		whole, masked := filtered(data, nil)
		var chunks []int
		for range len(data)/(int(step)+1) + 1 {
			chunks = append(chunks, int(step)+1)
		}
		split, _ := filtered(data, chunks)
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; d > time.Second || alloc > 32<<20 {
			t.Fatalf("%d bytes: %v and %d MB", len(data), d, alloc>>20)
		}
		if whole != split {
			t.Fatalf("whole\n%q\nsplit by %d\n%q", whole, step+1, split)
		}
		for _, line := range strings.FieldsFunc(whole, func(r rune) bool { return r == '\n' || r == '\r' }) {
			body := strings.TrimLeft(line, " \t")
			if strings.HasPrefix(body, addMaskCommand) && !strings.HasPrefix(body, addMaskCommand+"*** ") &&
				body != addMaskCommand+"***" && body != addMaskCommand+" (nothing to mask)" {
				t.Fatalf("a command line reached the log: %q", line)
			}
		}
		for _, v := range masked {
			if v == "" {
				t.Fatal("an empty value was masked")
			}
			if v == "(refused)" {
				continue
			}
		}
	})
}
