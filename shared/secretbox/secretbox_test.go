package secretbox

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"
)

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTrip(t *testing.T) {
	key := randomKey(t)
	aad := []byte("project-1/DEPLOY_TOKEN")
	for _, plain := range [][]byte{nil, []byte("x"), []byte("hunter2 and a longer secret value\n")} {
		sealed, err := Seal(key, plain, aad)
		if err != nil {
			t.Fatal(err)
		}
		if len(sealed) != Overhead+len(plain) || sealed[0] != version {
			t.Fatalf("sealed is %d bytes with version %d, want %d with %d", len(sealed), sealed[0], Overhead+len(plain), version)
		}
		if len(plain) > 8 && bytes.Contains(sealed, plain) {
			t.Fatal("plaintext visible in sealed value")
		}
		got, err := Open(key, sealed, aad)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("Open = %q, want %q", got, plain)
		}
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	key := randomKey(t)
	a, err := Seal(key, []byte("same"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Seal(key, []byte("same"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical")
	}
}

func TestOpenRefuses(t *testing.T) {
	key := randomKey(t)
	aad := []byte("project-1/DEPLOY_TOKEN")
	sealed, err := Seal(key, []byte("hunter2"), aad)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		key    []byte
		sealed []byte
		aad    []byte
	}{
		{"wrong aad (another row)", key, sealed, []byte("project-2/DEPLOY_TOKEN")},
		{"missing aad", key, sealed, nil},
		{"wrong key", randomKey(t), sealed, aad},
		{"unknown version", key, append([]byte{version + 1}, sealed[1:]...), aad},
		{"empty", key, nil, aad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(tt.key, tt.sealed, tt.aad); !errors.Is(err, ErrOpen) {
				t.Fatalf("Open = %v, want ErrOpen", err)
			}
		})
	}
	t.Run("every tampered byte", func(t *testing.T) {
		for i := range sealed {
			bad := bytes.Clone(sealed)
			bad[i] ^= 0x01
			if _, err := Open(key, bad, aad); !errors.Is(err, ErrOpen) {
				t.Fatalf("byte %d flipped: Open = %v, want ErrOpen", i, err)
			}
		}
	})
	t.Run("every truncation", func(t *testing.T) {
		for n := range len(sealed) {
			if _, err := Open(key, sealed[:n], aad); !errors.Is(err, ErrOpen) {
				t.Fatalf("first %d bytes: Open = %v, want ErrOpen", n, err)
			}
		}
	})
}

func TestKeyLength(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := Seal(make([]byte, n), []byte("x"), nil); err == nil {
			t.Fatalf("Seal with a %d-byte key succeeded", n)
		}
		if _, err := Open(make([]byte, n), make([]byte, Overhead), nil); err == nil || errors.Is(err, ErrOpen) {
			t.Fatalf("Open with a %d-byte key = %v, want a key length error", n, err)
		}
	}
}
