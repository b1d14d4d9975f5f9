// Package secretbox is envelope encryption for project secrets at rest.
//
// A secret value is sealed with AES-256-GCM under its project's data key
// (Seal, Open). The data key is stored only in wrapped form, wrapped by a
// master key that a Keyring holds: AWS KMS in AWS (KMSKeyring), a local key
// file on the dev stack and in tests (FileKeyring). Cache keeps unwrapped
// data keys for a while so a warm Lambda container asks KMS once per project
// key, not once per request.
//
// No error from this package contains key material or plaintext.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// KeySize is the size of data keys and of file master keys: AES-256.
const KeySize = 32

const (
	// version is the first byte of every sealed value; a new format gets a
	// new byte so old rows stay readable.
	version   = 1
	nonceSize = 12
	tagSize   = 16
	// Overhead is how much longer a sealed value is than its plaintext.
	Overhead = 1 + nonceSize + tagSize
)

// ErrOpen is returned (wrapped) when a sealed value does not open: the
// wrong key, the wrong aad (a ciphertext copied to another row), or a
// corrupted or truncated value. GCM cannot tell these apart, and neither
// can we.
var ErrOpen = errors.New("secretbox: cannot open sealed value (wrong key, wrong row, or corrupted)")

// Seal encrypts plaintext under dataKey. The output is
// 1 version byte || 12-byte random nonce || ciphertext+tag. aad is
// authenticated but not stored: callers pass what identifies the row (the
// project ID and the secret's name), and Open must be given the same.
func Seal(dataKey, plaintext, aad []byte) ([]byte, error) {
	aead, err := newGCM(dataKey)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+nonceSize, Overhead+len(plaintext))
	out[0] = version
	// Random 96-bit nonces are safe far beyond the number of secrets a
	// project key will ever seal (the GCM limit is about 2^32 messages).
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("secretbox: nonce: %w", err)
	}
	return aead.Seal(out, out[1:], plaintext, aad), nil
}

// Open decrypts a value made by Seal with the same dataKey and aad. Any
// mismatch or corruption is ErrOpen.
func Open(dataKey, sealed, aad []byte) ([]byte, error) {
	aead, err := newGCM(dataKey)
	if err != nil {
		return nil, err
	}
	if len(sealed) < Overhead {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrOpen, len(sealed))
	}
	if sealed[0] != version {
		return nil, fmt.Errorf("%w: unknown version %d", ErrOpen, sealed[0])
	}
	plain, err := aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], aad)
	if err != nil {
		// The GCM error says nothing useful and nothing secret; ours is
		// the one callers test for.
		return nil, ErrOpen
	}
	return plain, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secretbox: key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	return cipher.NewGCM(block)
}
