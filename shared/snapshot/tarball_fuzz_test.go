package snapshot_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"runtime"
	"testing"
	"time"

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
		parent, ws := canaryWorkspace(t)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		// A hang is the worst time: crash with every goroutine's stack so
		// that the fuzzer keeps the input.
		watchdog := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic("extraction hangs:\n" + string(buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		err := snapshot.ExtractTarball(bytes.NewReader(gz.Bytes()), ws, snapshot.Limits{MaxTotalBytes: 16 << 20, MaxFileBytes: 8 << 20})
		elapsed := time.Since(start)
		runtime.ReadMemStats(&after)
		if elapsed > 3*time.Second {
			t.Fatalf("extraction of %d tar bytes took %v", len(tarBytes), elapsed)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 160<<20 {
			t.Fatalf("extraction of %d tar bytes allocated %d MiB", len(tarBytes), alloc>>20)
		}
		checkCanary(t, parent)
		if err == nil {
			checkLinksInside(t, ws)
		}
	})
}
