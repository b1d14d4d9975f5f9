package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func tarGz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := []byte("x")
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write(body)
		}
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

// TestExtractTarball: GitHub's layout is unpacked with its top directory
// stripped and the pax global header skipped; entries outside the top
// directory, or escaping it, are refused.
func TestExtractTarball(t *testing.T) {
	good := tarGz(t,
		tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}},
		tar.Header{Typeflag: tar.TypeDir, Name: "o-r-abc/", Mode: 0o775},
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/a.sh", Mode: 0o775},
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/d/b.txt", Mode: 0o664},
		tar.Header{Typeflag: tar.TypeSymlink, Name: "o-r-abc/link", Linkname: "d/b.txt", Mode: 0o777},
		// Not in sorted order, going up and down the tree: the extractor's
		// open directories must follow.
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/d/e/f/deep.txt", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/c/up.txt", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/d/e/back.txt", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/d-x/side.txt", Mode: 0o644},
		tar.Header{Typeflag: tar.TypeReg, Name: "o-r-abc/d/again.txt", Mode: 0o644},
	)
	dir := t.TempDir()
	if err := ExtractTarball(bytes.NewReader(good), dir, Limits{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("a.sh: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "d/b.txt" {
		t.Fatalf("link: %q %v", target, err)
	}
	for _, p := range []string{"d/b.txt", "d/e/f/deep.txt", "c/up.txt", "d/e/back.txt", "d-x/side.txt", "d/again.txt"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != "x" {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	for name, data := range map[string][]byte{
		"second top directory": tarGz(t, tar.Header{Typeflag: tar.TypeReg, Name: "top/a", Mode: 0o644},
			tar.Header{Typeflag: tar.TypeReg, Name: "other/b", Mode: 0o644}),
		"dot-dot":          tarGz(t, tar.Header{Typeflag: tar.TypeReg, Name: "top/../../etc/x", Mode: 0o644}),
		"escaping symlink": tarGz(t, tar.Header{Typeflag: tar.TypeSymlink, Name: "top/l", Linkname: "../../etc", Mode: 0o777}),
		"hard link":        tarGz(t, tar.Header{Typeflag: tar.TypeLink, Name: "top/h", Linkname: "top/a", Mode: 0o644}),
		"not gzip":         []byte("plain text"),
	} {
		if err := ExtractTarball(bytes.NewReader(data), t.TempDir(), Limits{}); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}

// TestExtractTarballWithoutDirFDs: the same through the os.Root-only path.
func TestExtractTarballWithoutDirFDs(t *testing.T) {
	defer UseDirFDs(false)()
	TestExtractTarball(t)
}
