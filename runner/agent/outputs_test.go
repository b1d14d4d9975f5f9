package agent

import (
	"encoding/base64"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/mask"
)

// TestParseOutputs: GitHub's $GITHUB_OUTPUT format, single-line and
// delimited multi-line values, later values replacing earlier ones.
func TestParseOutputs(t *testing.T) {
	got, err := parseOutputs([]byte("version=1.2.3\r\nempty=\nnotes<<EOF\nline one\n\nline=two\nEOF\nversion=2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got["version"] != "2" || got["empty"] != "" || got["notes"] != "line one\n\nline=two" || len(got) != 3 {
		t.Fatalf("outputs %q", got)
	}
	for in, want := range map[string]string{
		"no equals sign\n":       "line 1 is not NAME=value",
		"x<<EOF\nnever closed\n": "not closed",
		"1bad=x\n":               `line 1: "1bad" is not a valid name`,
		"x<<\n\n":                "x<< has no delimiter",
		"1bad<<EOF\na\nb\nEOF\n": `line 1: "1bad" is not a valid name`,
	} {
		if _, err := parseOutputs([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	var many strings.Builder
	for i := range MaxOutputs + 1 {
		many.WriteString("o" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "=1\n")
	}
	if _, err := parseOutputs([]byte(many.String())); err == nil {
		t.Fatal("more than MaxOutputs outputs were accepted")
	}
}

// FuzzParseOutputs: any file parses or is refused, without panicking,
// within a second and 16 MB for 64 KiB, and every output it returns has a
// valid name.
func FuzzParseOutputs(f *testing.F) {
	f.Add([]byte("a=b\nc<<X\nd\nX\n"))
	f.Add([]byte("x<<EOF\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		out, err := parseOutputs(data)
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; d > time.Second || alloc > 16<<20 {
			t.Fatalf("%d bytes: %v and %d MB", len(data), d, alloc>>20)
		}
		if err == nil && len(out) > MaxOutputs {
			t.Fatalf("%d outputs", len(out))
		}
		for k := range out {
			if !domain.OutputNameRE().MatchString(k) {
				t.Fatalf("output name %q", k)
			}
		}
	})
}

// TestSecretOutputsAreDropped: an output holding a secret, as is or in a
// form the log masks (base64 here), is not passed on, and is named; the
// others are; with no secrets every output is.
func TestSecretOutputsAreDropped(t *testing.T) {
	const secret = "s3cr3t-deploy-token"
	outputs := map[string]string{"version": "1.2.3", "token": "t=" + secret,
		"encoded": base64.StdEncoding.EncodeToString([]byte(secret)), "empty": ""}
	dropped := dropSecretOutputs(outputs, mask.New([]string{secret}))
	if strings.Join(dropped, ",") != "encoded,token" || len(outputs) != 2 || outputs["version"] != "1.2.3" {
		t.Fatalf("dropped %v, kept %v", dropped, outputs)
	}
	if dropped := dropSecretOutputs(map[string]string{"a": secret}, nil); len(dropped) != 0 {
		t.Fatalf("with no secrets: dropped %v", dropped)
	}
}
