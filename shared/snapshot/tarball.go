package snapshot

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"
)

// ExtractTarball unpacks a gzipped tar of a repository as GitHub's tarball
// endpoint (and `git archive --prefix=dir/`) makes it: every entry under one
// top-level directory, which is stripped, and pax global headers (the
// commit ID) skipped. It applies the same rules and limits as Extract and
// writes through an os.Root into dest, an empty directory. Snapshotting
// dest with DirTree then gives the digests the CLI computes for that commit.
func ExtractTarball(r io.Reader, dest string, lim Limits) error {
	lim = lim.withDefaults()
	root, err := os.OpenRoot(dest)
	if err != nil {
		return fmt.Errorf("open directory: %w", err)
	}
	defer root.Close()
	if names, err := readDirNames(root); err != nil || len(names) > 0 {
		return fmt.Errorf("directory %s must be empty", dest)
	}
	compressed := &countingReader{r: r}
	zr, err := gzip.NewReader(compressed)
	if err != nil {
		return refuse("tarball is not gzip: %v", err)
	}
	defer zr.Close()
	decompressed := &countingReader{r: zr, ratioOf: compressed, maxRatio: lim.MaxRatio}
	prefix := ""
	strip := func(hdr *tar.Header) (string, bool, error) {
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			return "", true, nil
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		top, rest, _ := strings.Cut(name, "/")
		if prefix == "" {
			prefix = top
		}
		if top != prefix || top == "" {
			return "", false, refuse("entry %.80q is not under the tarball's top directory %q", hdr.Name, prefix)
		}
		return rest, rest == "", nil
	}
	out, err := newRootSink(root)
	if err != nil {
		return err
	}
	err = unpackTar(tar.NewReader(decompressed), lim, out, strip)
	out.close()
	if err != nil {
		return err
	}
	return drain(decompressed, "tarball")
}
