package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestCopyFile: exactly the listed size is copied and hashed; a file that
// is longer or shorter than it was listed (it changed between listing and
// reading) is an error, at any size relative to the read buffer; a path
// that became a symlink is not followed.
func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	buf := make([]byte, 16)
	for _, n := range []int{0, 1, 15, 16, 17, 32, 100} {
		data := bytes.Repeat([]byte("x"), n)
		name := filepath.Join(dir, "f")
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		sum, err := copyFile(&out, name, int64(n), buf)
		want := sha256.Sum256(data)
		if err != nil || sum != hex.EncodeToString(want[:]) || !bytes.Equal(out.Bytes(), data) {
			t.Errorf("%d bytes: %v, copied %d", n, err, out.Len())
		}
		if n > 0 {
			if _, err := copyFile(&bytes.Buffer{}, name, int64(n-1), buf); err == nil || !strings.Contains(err.Error(), "grew") {
				t.Errorf("%d bytes listed as %d: %v, want grew", n, n-1, err)
			}
		}
		if _, err := copyFile(&bytes.Buffer{}, name, int64(n+1), buf); err == nil || !strings.Contains(err.Error(), "shrank") {
			t.Errorf("%d bytes listed as %d: %v, want shrank", n, n+1, err)
		}
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if _, err := copyFile(&bytes.Buffer{}, filepath.Join(dir, "l"), 100, buf); err == nil {
		t.Error("a symlink was followed")
	}
}

// jobsInput is deterministic, compressible and spans several of the
// encoder's jobs (8 MiB each with a 2 MiB window).
func jobsInput() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 20<<20; i++ {
		fmt.Fprintf(&b, "line %d of the pinned input, %x\n", i, uint32(i)*2654435761)
	}
	return b.Bytes()
}

// TestEncoderJobs: the blob does not depend on how many workers compress
// it or on their timing, only on the bytes and the fixed settings.
func TestEncoderJobs(t *testing.T) {
	in := jobsInput()
	encode := func(workers int) []byte {
		var out bytes.Buffer
		enc, err := zstd.NewWriter(&out, encoderOptions(workers)...)
		if err != nil {
			t.Fatal(err)
		}
		// Uneven writes, as the tar writer makes them.
		for rest := in; len(rest) > 0; {
			n := min(len(rest), 1+len(rest)%70001)
			if _, err := enc.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	want := encode(2)
	for _, workers := range []int{2, 3, 4, 8} {
		if got := encode(workers); !bytes.Equal(got, want) {
			t.Errorf("%d workers: %d bytes differ from 2 workers' %d", workers, len(got), len(want))
		}
	}
	if one := encode(1); bytes.Equal(one, want) {
		t.Error("one worker gives the same bytes: the job split is not in use, so this test proves nothing")
	}
}
