package secretbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Keyring wraps and unwraps data keys.
type Keyring interface {
	// GenerateDataKey returns a fresh 32-byte data key and its wrapped form.
	GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error)
	// Decrypt unwraps a data key made by GenerateDataKey (by this master key).
	Decrypt(ctx context.Context, wrapped []byte) ([]byte, error)
	// ID names the master key (the KMS key ID/ARN, or "file:<sha256 prefix
	// of the key>"), stored beside wrapped keys.
	ID() string
}

// FromEnv returns the keyring the environment configures:
// FORGECI_KMS_KEY_ID set means KMS (that key), else FORGECI_SECRETS_KEY_FILE
// set means a file keyring (the file must exist). Neither set returns
// (nil, nil): secrets are not configured. Both set is an error, since
// silently preferring one would wrap keys with a master key the operator
// did not mean.
func FromEnv(ctx context.Context) (Keyring, error) {
	keyID := os.Getenv("FORGECI_KMS_KEY_ID")
	path := os.Getenv("FORGECI_SECRETS_KEY_FILE")
	switch {
	case keyID != "" && path != "":
		return nil, errors.New("secretbox: set FORGECI_KMS_KEY_ID or FORGECI_SECRETS_KEY_FILE, not both")
	case keyID != "":
		k, err := NewKMSKeyring(ctx, keyID)
		if err != nil {
			// Not k: a nil *KMSKeyring would be a non-nil Keyring.
			return nil, err
		}
		return k, nil
	case path != "":
		k, err := NewFileKeyring(path, false)
		if err != nil {
			return nil, err
		}
		return k, nil
	}
	return nil, nil
}

// FileKeyring holds the master key in a local file: 32 random bytes written
// as 64 hex characters and a newline (surrounding whitespace is ignored
// when reading). The file must not be accessible to group or others.
type FileKeyring struct {
	key []byte
	id  string
}

// wrapAAD binds wrapped data keys to their purpose, so a value sealed
// under the master key for any other reason never unwraps as a data key.
var wrapAAD = []byte("forgeci/secretbox data key")

// NewFileKeyring reads the master key at path. With create, a missing file
// is made with a fresh key (mode 0600); when several processes race to
// create it, all of them end up with the one key that was published first.
func NewFileKeyring(path string, create bool) (*FileKeyring, error) {
	key, err := readKeyFile(path)
	if create && errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
		key, err = readKeyFile(path)
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(key)
	return &FileKeyring{key: key, id: "file:" + hex.EncodeToString(sum[:8])}, nil
}

// ID is "file:" and the first 8 bytes of the key's SHA-256, in hex.
func (k *FileKeyring) ID() string { return k.id }

// GenerateDataKey makes a random data key and wraps it under the master
// key: the wrapped form is a Seal output (version byte, nonce, ciphertext).
func (k *FileKeyring) GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error) {
	plain = make([]byte, KeySize)
	if _, err := rand.Read(plain); err != nil {
		return nil, nil, fmt.Errorf("secretbox: generate data key: %w", err)
	}
	wrapped, err = Seal(k.key, plain, wrapAAD)
	if err != nil {
		return nil, nil, err
	}
	return plain, wrapped, nil
}

// Decrypt unwraps a data key wrapped by this master key.
func (k *FileKeyring) Decrypt(ctx context.Context, wrapped []byte) ([]byte, error) {
	plain, err := Open(k.key, wrapped, wrapAAD)
	if err != nil {
		return nil, fmt.Errorf("secretbox: unwrap data key with %s (another master key, or corrupted): %w", k.id, err)
	}
	if len(plain) != KeySize {
		return nil, fmt.Errorf("secretbox: unwrapped data key is %d bytes, want %d", len(plain), KeySize)
	}
	return plain, nil
}

// readKeyFile reads and checks a key file. A missing file is an error
// wrapping fs.ErrNotExist.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secretbox: key file: %w", err)
	}
	defer f.Close()
	// Check the file we opened, not the path, so a swap between the check
	// and the read changes nothing.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secretbox: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secretbox: key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secretbox: key file %s has mode %04o: it must not be accessible to group or others (chmod 600 it)", path, perm)
	}
	raw, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return nil, fmt.Errorf("secretbox: key file %s: %w", path, err)
	}
	text := strings.TrimSpace(string(raw))
	if len(text) != 2*KeySize {
		return nil, fmt.Errorf("secretbox: key file %s: want %d hex characters (%d bytes), found %d characters", path, 2*KeySize, KeySize, len(text))
	}
	key, err := hex.DecodeString(text)
	if err != nil {
		// hex's error quotes the offending character, a piece of the key.
		return nil, fmt.Errorf("secretbox: key file %s: not hex", path)
	}
	return key, nil
}

// createKeyFile writes a fresh key to a temporary file beside path and
// publishes it with link(2), which, unlike rename, fails when path already
// exists: the first process to publish wins, and a racing loser reads the
// winner's key. A reader never sees a partly written file.
func createKeyFile(path string) error {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("secretbox: generate master key: %w", err)
	}
	// CreateTemp makes the file with mode 0600.
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("secretbox: create key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("secretbox: write key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return fmt.Errorf("secretbox: create key file: %w", err)
	}
	// Losing the master key loses every secret, so make the new name
	// durable before anything is wrapped with it.
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("secretbox: sync key file directory: %w", err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("secretbox: sync key file directory: %w", err)
	}
	return nil
}
