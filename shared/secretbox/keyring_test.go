package secretbox

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

func newFileKeyring(t *testing.T) (*FileKeyring, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "master.key")
	k, err := NewFileKeyring(path, true)
	if err != nil {
		t.Fatal(err)
	}
	return k, path
}

func TestFileKeyringRoundTrip(t *testing.T) {
	ctx := context.Background()
	k, _ := newFileKeyring(t)
	if !regexp.MustCompile(`^file:[0-9a-f]{16}$`).MatchString(k.ID()) {
		t.Fatalf("ID = %q", k.ID())
	}
	plain, wrapped := checkRoundTrip(t, k)
	plain2, _ := newDataKey(t, k)
	if bytes.Equal(plain, plain2) {
		t.Fatal("two data keys are equal")
	}

	bad := bytes.Clone(wrapped)
	bad[len(bad)-1] ^= 1
	if _, err := k.Decrypt(ctx, bad); !errors.Is(err, ErrOpen) {
		t.Fatalf("tampered wrapped key: %v, want ErrOpen", err)
	}
	other, _ := newFileKeyring(t)
	if _, err := other.Decrypt(ctx, wrapped); !errors.Is(err, ErrOpen) {
		t.Fatalf("another master key: %v, want ErrOpen", err)
	}
}

func TestFileKeyringCreatedPrivateAndReused(t *testing.T) {
	ctx := context.Background()
	k1, path := newFileKeyring(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}\n$`).Match(raw) {
		t.Fatalf("key file is not 64 hex characters and a newline (%d bytes)", len(raw))
	}

	_, wrapped := newDataKey(t, k1)
	for _, create := range []bool{false, true} {
		k2, err := NewFileKeyring(path, create)
		if err != nil {
			t.Fatal(err)
		}
		if k2.ID() != k1.ID() {
			t.Fatalf("re-open (create=%v): ID %s, want %s", create, k2.ID(), k1.ID())
		}
		if _, err := k2.Decrypt(ctx, wrapped); err != nil {
			t.Fatalf("re-open (create=%v) cannot unwrap: %v", create, err)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(after, raw) {
		t.Fatalf("key file changed on re-open (%v)", err)
	}
}

func TestFileKeyringMissingWithoutCreate(t *testing.T) {
	_, err := NewFileKeyring(filepath.Join(t.TempDir(), "absent.key"), false)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestFileKeyringRefusesBadFiles(t *testing.T) {
	good := strings.Repeat("ab", KeySize) + "\n"
	tests := []struct {
		name    string
		content string
		mode    fs.FileMode
		want    string
	}{
		{"world readable", good, 0o644, "mode 0644"},
		{"group readable", good, 0o640, "mode 0640"},
		{"too short", strings.Repeat("ab", KeySize-1), 0o600, "found 62 characters"},
		{"too long", strings.Repeat("ab", KeySize+1), 0o600, "found 66 characters"},
		{"empty", "", 0o600, "found 0 characters"},
		{"raw bytes, not hex", strings.Repeat("k", KeySize), 0o600, "found 32 characters"},
		{"not hex", strings.Repeat("zq", KeySize), 0o600, "not hex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "master.key")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			// Chmod, since WriteFile's mode passes through the umask.
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			for _, create := range []bool{false, true} {
				_, err := NewFileKeyring(path, create)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("create=%v: err = %v, want one mentioning %q", create, err, tt.want)
				}
				if tt.content != "" && strings.Contains(err.Error(), strings.TrimSpace(tt.content)[:8]) {
					t.Fatalf("error shows key file content: %v", err)
				}
			}
		})
	}
}

// TestFileKeyringConcurrentCreate races several creators on one missing
// file, many times over: all must end with the same key, and no temporary
// file may be left behind.
func TestFileKeyringConcurrentCreate(t *testing.T) {
	const rounds, racers = 20, 8
	for range rounds {
		dir := t.TempDir()
		path := filepath.Join(dir, "master.key")
		ids := make([]string, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				k, err := NewFileKeyring(path, true)
				errs[i] = err
				if err == nil {
					ids[i] = k.ID()
				}
			})
		}
		close(start)
		wg.Wait()
		for i := range racers {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("racers ended with different keys: %v", ids)
			}
		}
		k, err := NewFileKeyring(path, false)
		if err != nil || k.ID() != ids[0] {
			t.Fatalf("re-open: %v, or another key than %s", err, ids[0])
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("directory holds %d entries (%v), want only the key file", len(entries), err)
		}
	}
}

func TestFromEnv(t *testing.T) {
	ctx := context.Background()
	fileKeyring, path := newFileKeyring(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")

	tests := []struct {
		name, kmsKey, file string
		wantID             string // "" means a nil keyring
		wantErr            bool
	}{
		{name: "neither"},
		{name: "both", kmsKey: "alias/forgeci", file: path, wantErr: true},
		{name: "kms", kmsKey: "alias/forgeci", wantID: "alias/forgeci"},
		{name: "file", file: path, wantID: fileKeyring.ID()},
		{name: "missing file is not created", file: path + ".absent", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("FORGECI_KMS_KEY_ID", tt.kmsKey)
			t.Setenv("FORGECI_SECRETS_KEY_FILE", tt.file)
			k, err := FromEnv(ctx)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			switch {
			case tt.wantID == "" && k != nil:
				t.Fatalf("keyring is a %T, want nil", k)
			case tt.wantID != "" && (k == nil || k.ID() != tt.wantID):
				t.Fatalf("keyring is a %T, want one with ID %s", k, tt.wantID)
			}
		})
	}
	if _, err := os.Stat(path + ".absent"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("FromEnv created a key file: %v", err)
	}
}
