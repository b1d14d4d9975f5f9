package snapshot_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/forgeci/forgeci/shared/snapshot"
)

// FuzzExtractTarball: whatever a GitHub tarball holds, its extraction
// (top directory stripped, pax headers skipped) never panics, never writes
// outside the workspace, leaves no link that resolves outside it, and
// stays within time and memory bounds.
func FuzzExtractTarball(f *testing.F) {
	f.Add(buildTar(f, []tarEntry{
		{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}}},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "octo-app-abc/", Mode: 0o755}},
		reg("octo-app-abc/README", "hello"),
		symlink("octo-app-abc/docs", "README"),
	}))
	f.Add(buildTar(f, []tarEntry{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "top/a/b/", Mode: 0o755}},
		symlink("top/a/b/up", ".."), symlink("top/y", "a/b/up/b/up/../../canary"),
	}))
	f.Fuzz(func(t *testing.T, tarBytes []byte) {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(tarBytes)
		_ = zw.Close()
		boundedExtract(t, len(tarBytes), func(ws string) error {
			return snapshot.ExtractTarball(bytes.NewReader(gz.Bytes()), ws, snapshot.Limits{MaxTotalBytes: 16 << 20, MaxFileBytes: 8 << 20})
		})
	})
}
