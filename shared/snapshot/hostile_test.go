package snapshot_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/forgeci/forgeci/shared/snapshot"
)

var update = flag.Bool("update", false, "rewrite testdata/hostile from the generators")

type tarEntry struct {
	hdr  tar.Header
	data []byte
	// size overrides the header size (for a lying header); data may be shorter.
}

func symlink(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func reg(name, data string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}, data: []byte(data)}
}

// hostile archives, each with the reason it must be refused.
var hostile = map[string]func() []tarEntry{
	"zip-slip": func() []tarEntry { return []tarEntry{reg("ok.txt", "ok"), reg("../evil.txt", "pwned")} },
	"zip-slip-nested": func() []tarEntry {
		return []tarEntry{reg("a/b/../../../evil.txt", "pwned")}
	},
	"absolute-path": func() []tarEntry { return []tarEntry{reg("/tmp/forgeci-hostile-abs.txt", "pwned")} },
	"symlink-escape-then-write": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "..", Mode: 0o777}}, reg("lnk/evil.txt", "pwned")}
	},
	"symlink-inside-then-write": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "sub/", Mode: 0o755}},
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "sub", Mode: 0o777}}, reg("lnk/x.txt", "through a link")}
	},
	"symlink-to-etc": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "etc", Linkname: "/etc", Mode: 0o777}}}
	},
	"symlink-to-parent-dir": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "../../..", Mode: 0o777}}}
	},
	// Issue 15: each link alone stays inside; followed through each
	// other, y reads the canary beside the workspace (either order).
	"symlink-chain-escape": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a/b/", Mode: 0o755}},
			symlink("a/b/up", ".."), symlink("y", "a/b/up/b/up/../../canary")}
	},
	"symlink-chain-escape-link-last": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a/b/", Mode: 0o755}},
			symlink("y", "a/b/up/b/up/../../canary"), symlink("a/b/up", "..")}
	},
	// The same, to a directory: writing through it lands outside.
	"symlink-chain-escape-dir": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a/b/", Mode: 0o755}},
			symlink("a/b/up", ".."), symlink("out", "a/b/up/b/up/../..")}
	},
	"symlink-chain-through-links": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d/e/", Mode: 0o755}},
			symlink("d/e/p", ".."), symlink("d/q", "e/p/e/p"), symlink("z", "d/q/../../x")}
	},
	"symlink-loop": func() []tarEntry {
		return []tarEntry{symlink("a", "b"), symlink("b", "a")}
	},
	"hard-link": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "passwd", Linkname: "/etc/passwd"}}}
	},
	"char-device": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666}}}
	},
	"fifo": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o644}}}
	},
	"duplicate-entry": func() []tarEntry { return []tarEntry{reg("a.txt", "first"), reg("a.txt", "second")} },
	"setuid": func() []tarEntry {
		e := reg("suid", "#!/bin/sh\n")
		e.hdr.Mode = 0o4755
		return []tarEntry{e}
	},
	// The header claims 10 GiB; the bytes never come. Refused at the header.
	"bomb-10g-header": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "huge.bin", Mode: 0o644, Size: 10 << 30}, data: make([]byte, 4096)}}
	},
	// 96 MiB of zeros compresses to a few KB: a ratio bomb.
	"bomb-ratio": func() []tarEntry {
		return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "zeros.bin", Mode: 0o644, Size: 96 << 20}, data: make([]byte, 96<<20)}}
	},
	"deep-nesting": func() []tarEntry {
		return []tarEntry{reg(strings.Repeat("d/", 100)+"x.txt", "deep")}
	},
	"very-long-name": func() []tarEntry {
		return []tarEntry{reg(strings.Repeat("n", 250)+"/"+strings.Repeat("m", 250)+"/"+strings.Repeat("o", 700)+".txt", "long")}
	},
	"file-then-inside-file": func() []tarEntry { return []tarEntry{reg("f", "file"), reg("f/g", "inside a file")} },
	"control-char-name":     func() []tarEntry { return []tarEntry{reg("bad\nname", "x")} },
}

func buildArchive(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, e := range entries {
		h := e.hdr
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if len(e.data) > 0 {
			// A lying header is followed by fewer bytes than it says.
			if _, err := tw.Write(e.data); err != nil && !errors.Is(err, tar.ErrWriteTooLong) {
				t.Fatal(err)
			}
		}
	}
	// Deliberately no Close for lying headers: Close would fail on them.
	_ = tw.Flush()
	_ = tw.Close()
	var out bytes.Buffer
	enc, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	_, _ = enc.Write(tarBuf.Bytes())
	_ = enc.Close()
	return out.Bytes()
}

// canaryWorkspace makes parent/{canary,ws} and returns parent and ws.
func canaryWorkspace(t testing.TB) (string, string) {
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "canary"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(parent, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return parent, ws
}

// checkCanary fails unless parent still holds exactly the canary, intact,
// and the workspace.
func checkCanary(t testing.TB, parent string) {
	t.Helper()
	names, _ := os.ReadDir(parent)
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "canary,ws" {
		t.Fatalf("something was written beside the workspace: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "canary")); string(b) != "canary" {
		t.Fatalf("canary changed: %q", b)
	}
	if _, err := os.Lstat("/tmp/forgeci-hostile-abs.txt"); err == nil {
		t.Fatal("an absolute path was written")
	}
}

// TestHostileCorpus: every archive in testdata/hostile is refused with
// ErrRefused and nothing lands outside the canary-checked workspace.
func TestHostileCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "hostile")
	if *update {
		_ = os.MkdirAll(dir, 0o755)
		for name, gen := range hostile {
			if err := os.WriteFile(filepath.Join(dir, name+".tar.zst"), buildArchive(t, gen()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.tar.zst"))
	if len(files) != len(hostile) {
		t.Fatalf("testdata/hostile has %d archives, generators %d: run go test -run TestHostileCorpus -update", len(files), len(hostile))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".tar.zst")
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			parent, ws := canaryWorkspace(t)
			_, err = snapshot.Extract(f, ws, snapshot.Limits{})
			if !errors.Is(err, snapshot.ErrRefused) {
				t.Fatalf("not refused: %v", err)
			}
			t.Logf("refused: %v", err)
			checkCanary(t, parent)
			// The control plane's in-memory check refuses it too.
			_, _ = f.Seek(0, 0)
			if _, _, err := snapshot.Inspect(f, snapshot.Limits{}, nil, 0); !errors.Is(err, snapshot.ErrRefused) {
				t.Fatalf("Inspect did not refuse: %v", err)
			}
		})
	}
}

// TestLimits: the count and size limits are enforced as configured.
func TestLimits(t *testing.T) {
	many := func(n int) []tarEntry {
		var es []tarEntry
		for i := range n {
			es = append(es, reg(strings.Repeat("x", i%7+1)+string(rune('a'+i%26))+"/"+string(rune('a'+i/26))+".txt", "y"))
		}
		return es
	}
	cases := []struct {
		name    string
		entries []tarEntry
		lim     snapshot.Limits
	}{
		{"file count", many(50), snapshot.Limits{MaxFiles: 20}},
		{"single file", []tarEntry{reg("big", strings.Repeat("z", 5000))}, snapshot.Limits{MaxFileBytes: 4096}},
		{"total bytes", []tarEntry{reg("a", strings.Repeat("z", 3000)), reg("b", strings.Repeat("z", 3000))}, snapshot.Limits{MaxTotalBytes: 5000}},
		{"path length", []tarEntry{reg(strings.Repeat("p", 300), "x")}, snapshot.Limits{MaxPathLen: 200}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, ws := canaryWorkspace(t)
			_, err := snapshot.Extract(bytes.NewReader(buildArchive(t, tc.entries)), ws, tc.lim)
			if !errors.Is(err, snapshot.ErrRefused) {
				t.Fatalf("not refused: %v", err)
			}
			checkCanary(t, parent)
		})
	}
	// Corrupt zstd and trailing garbage are refused too.
	good := buildArchive(t, []tarEntry{reg("a", "alpha")})
	for name, blob := range map[string][]byte{"truncated": good[:len(good)-5], "garbage": append(append([]byte{}, good...), 1, 2, 3)} {
		_, ws := canaryWorkspace(t)
		if _, err := snapshot.Extract(bytes.NewReader(blob), ws, snapshot.Limits{}); err == nil {
			t.Errorf("%s archive accepted", name)
		}
	}
}

// FuzzExtract: whatever tar bytes come in, extraction never panics and
// never writes outside the workspace. Seeded from testdata/hostile.
func FuzzExtract(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "hostile", "*.tar.zst"))
	for _, file := range files {
		if strings.Contains(file, "bomb") {
			continue // large when decompressed; the fuzzer finds its own
		}
		raw, _ := os.ReadFile(file)
		dec, _ := zstd.NewReader(bytes.NewReader(raw))
		tarBytes, _ := io.ReadAll(dec)
		dec.Close()
		f.Add(tarBytes)
	}
	f.Add(buildTar(f, []tarEntry{reg("a/b.txt", "hello"), {hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "a/l", Linkname: "b.txt", Mode: 0o777}}}))
	// Links through links, inside and out, for the resolver oracle.
	f.Add(buildTar(f, []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "a/b/", Mode: 0o755}},
		symlink("a/b/up", ".."), symlink("a/x", "b/up/b"), symlink("y", "a/b/up/b/up/../../canary")}))
	f.Add(buildTar(f, []tarEntry{reg("lib/v1/tool", "x"), symlink("lib/current", "v1"), symlink("bin/tool", "../lib/current/tool")}))
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	f.Fuzz(func(t *testing.T, tarBytes []byte) {
		blob := enc.EncodeAll(tarBytes, nil)
		boundedExtract(t, len(tarBytes), func(ws string) error {
			_, err := snapshot.Extract(bytes.NewReader(blob), ws, snapshot.Limits{MaxTotalBytes: 16 << 20, MaxFileBytes: 8 << 20})
			return err
		})
	})
}

// boundedExtract runs extract into a canary workspace under the fuzz
// targets' oracles: time (a hang crashes with every goroutine's stack, so
// that the fuzzer keeps the input; over 3 s fails) and memory (160 MiB
// allocated), nothing written beside the workspace, and no link of an
// accepted tree that resolves outside it.
func boundedExtract(t *testing.T, inputLen int, extract func(ws string) error) {
	parent, ws := canaryWorkspace(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	watchdog := time.AfterFunc(10*time.Second, func() {
		buf := make([]byte, 1<<20)
		panic("extraction hangs:\n" + string(buf[:runtime.Stack(buf, true)]))
	})
	defer watchdog.Stop()
	err := extract(ws)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if elapsed > 3*time.Second {
		t.Fatalf("extraction of %d input bytes took %v", inputLen, elapsed)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 160<<20 {
		t.Fatalf("extraction of %d input bytes allocated %d MiB", inputLen, alloc>>20)
	}
	checkCanary(t, parent)
	if err == nil {
		// (A refused tree may be partly written; its caller removes it.)
		checkLinksInside(t, ws)
	}
}

// checkLinksInside is the resolver oracle, asked of the kernel: every
// symlink in ws that resolves at all resolves to something strictly inside
// ws (an inode of ws's tree, not ws itself), so nothing outside is
// readable or writable through any link.
func checkLinksInside(t *testing.T, ws string) {
	t.Helper()
	inside := map[uint64]bool{}
	var links []string
	_ = filepath.Walk(ws, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if info.Mode()&os.ModeSymlink != 0 {
			links = append(links, p)
		}
		if p != ws {
			inside[info.Sys().(*syscall.Stat_t).Ino] = true
		}
		return nil
	})
	for _, l := range links {
		fi, err := os.Stat(l)
		if err != nil {
			continue // does not resolve: nothing reachable through it
		}
		if !inside[fi.Sys().(*syscall.Stat_t).Ino] {
			target, _ := os.Readlink(l)
			t.Fatalf("symlink %s -> %s reaches outside the workspace (or its root)", l, target)
		}
	}
}

func buildTar(t testing.TB, entries []tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		_ = tw.WriteHeader(&h)
		_, _ = tw.Write(e.data)
	}
	_ = tw.Close()
	return buf.Bytes()
}

// TestWithoutDirFDs: the os.Root-only path that extraction takes off Linux
// writes the same trees, recomputes the same manifests and refuses the same
// archives as the descriptor path the other tests take here.
func TestWithoutDirFDs(t *testing.T) {
	defer snapshot.UseDirFDs(false)()
	t.Run("round trip", TestRoundTrip)
	t.Run("tampering", TestTampering)
	t.Run("hostile corpus", TestHostileCorpus)
	t.Run("limits", TestLimits)
}
