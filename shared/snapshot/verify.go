package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// ErrDigestMismatch is returned when bytes do not match their digest.
var ErrDigestMismatch = errors.New("digest mismatch")

// Download streams url into a new temporary file in dir while hashing it,
// and keeps the file only if its size and SHA-256 match. The caller removes
// the returned file when done.
func Download(ctx context.Context, client *http.Client, url, digest string, size int64, dir string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download: HTTP %s", resp.Status)
	}
	f, err := os.CreateTemp(dir, "blob-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(name)
		return "", err
	}
	h := sha256.New()
	// One byte more than expected is enough to know it is too long.
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, size+1))
	if err != nil {
		return fail(fmt.Errorf("download: %w", err))
	}
	if n != size {
		return fail(fmt.Errorf("%w: blob %s is %d bytes or more, expected %d", ErrDigestMismatch, digest, n, size))
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return fail(fmt.Errorf("%w: downloaded blob hashes to %s, expected %s", ErrDigestMismatch, got, digest))
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	return name, nil
}

// VerifyFile checks a local blob's size and digest.
func VerifyFile(name, digest string, size int64) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	got, n, err := hashOf(f)
	if err != nil {
		return err
	}
	if n != size || got != digest {
		return fmt.Errorf("%w: blob is %d bytes hashing to %s, expected %d bytes %s", ErrDigestMismatch, n, got, size, digest)
	}
	return nil
}

// ExtractVerified extracts a blob whose digest was already verified into
// dest and checks that what was written has the expected manifest digest.
func ExtractVerified(blobFile, dest, manifestDigest string, lim Limits) (Manifest, error) {
	f, err := os.Open(blobFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := Extract(f, dest, lim)
	if err != nil {
		return nil, err
	}
	if got := m.Digest(); got != manifestDigest {
		return nil, fmt.Errorf("%w: extracted tree has manifest %s, expected %s", ErrDigestMismatch, got, manifestDigest)
	}
	return m, nil
}
