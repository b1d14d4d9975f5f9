package idtoken

import (
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/forgeci/forgeci/shared/awsenv"
)

// backend is where the keys live: all that differs between KMS and a key
// file. Everything about the JWT itself is common (jwt.go).
type backend interface {
	// publicKey fetches the public key of keyID, checked to be an RSA key
	// of 2048 bits or more that can sign RSASSA-PKCS1-v1_5 SHA-256.
	publicKey(ctx context.Context, keyID string) (*rsa.PublicKey, error)
	// signDigest signs a SHA-256 digest with keyID, RSASSA-PKCS1-v1_5.
	signDigest(ctx context.Context, keyID string, digest []byte) ([]byte, error)
}

// kmsTimeout bounds each KMS call, retries included, so a hung KMS cannot
// hold a token request (Sign's OpaqueSigner has no context of its own).
const kmsTimeout = 5 * time.Second

// kmsMaxAttempts is how many times a KMS call is tried at most
// (awsenv.Client's retries, as in shared/secretbox), within kmsTimeout:
// a KMS that does not answer at all gets two.
const kmsMaxAttempts = awsenv.MaxAttempts

// minRSABits is the smallest RSA modulus accepted, for signing or in the
// JWKS: what RS256 relying parties (and KMS) accept.
const minRSABits = 2048

// publicKey is a configured key's public half with its JWK key ID.
type publicKey struct {
	pub *rsa.PublicKey
	kid string // RFC 7638 SHA-256 thumbprint, base64url without padding
}

func newPublicKey(pub *rsa.PublicKey) (*publicKey, error) {
	jwk := jose.JSONWebKey{Key: pub}
	sum, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf(errorPrefix+"thumbprint: %w", err)
	}
	return &publicKey{pub: pub, kid: base64.RawURLEncoding.EncodeToString(sum)}, nil
}

// key returns the public key of keyID, fetching it on first need. A failed
// fetch is remembered for retryAfter, then tried again.
func (i *Issuer) key(ctx context.Context, keyID string) (*publicKey, error) {
	i.mu.Lock()
	k, f := i.keys[keyID], i.failed[keyID]
	i.mu.Unlock()
	if k != nil {
		return k, nil
	}
	if f.err != nil && time.Since(f.at) < i.retryAfter {
		return nil, f.err
	}
	// Fetched without the lock: concurrent first calls may both fetch,
	// which is harmless, rather than all wait on one slow KMS call.
	pub, err := i.backend.publicKey(ctx, keyID)
	if err != nil {
		i.mu.Lock()
		i.failed[keyID] = keyFailure{at: time.Now(), err: err}
		i.mu.Unlock()
		return nil, err
	}
	if k, err = newPublicKey(pub); err != nil {
		return nil, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if cached := i.keys[keyID]; cached != nil {
		return cached, nil
	}
	i.keys[keyID] = k
	return k, nil
}

// allKeys returns the public keys of the configured keys that can be
// fetched, in order: one that cannot (a retired key disabled before it
// was dropped from the list) is left out, and only its tokens stop
// verifying. It fails only when none can be fetched.
func (i *Issuer) allKeys(ctx context.Context) ([]*publicKey, error) {
	keys := make([]*publicKey, 0, len(i.keyIDs))
	var first error
	for _, id := range i.keyIDs {
		k, err := i.key(ctx, id)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, first
	}
	return keys, nil
}

// checkRSA refuses public keys too small for RS256.
func checkRSA(keyID string, pub any) (*rsa.PublicKey, error) {
	rsaPub, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf(errorPrefix+"key %s is a %T, want an RSA key", keyID, pub)
	}
	if rsaPub.N.BitLen() < minRSABits {
		return nil, fmt.Errorf(errorPrefix+"key %s is %d-bit RSA, want %d bits or more", keyID, rsaPub.N.BitLen(), minRSABits)
	}
	return rsaPub, nil
}

// kmsBackend keeps the keys in AWS KMS. Its two calls are signed
// requests of KMS's JSON API (awsenv.Client), as in shared/secretbox, not
// the SDK's KMS client, which weighs 1.6 MB of the oidc bootstrap.
type kmsBackend struct {
	client *awsenv.Client
}

func newKMSBackend() (*kmsBackend, error) {
	client, err := awsenv.NewClient("kms", "KMS")
	if err != nil {
		return nil, fmt.Errorf(errorPrefix+"%w", err)
	}
	return &kmsBackend{client: client}, nil
}

const rs256 = "RSASSA_PKCS1_V1_5_SHA_256"

func (b *kmsBackend) publicKey(ctx context.Context, keyID string) (*rsa.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, kmsTimeout)
	defer cancel()
	var out struct {
		KeySpec, KeyUsage string
		SigningAlgorithms []string
		PublicKey         []byte // DER, base64 in the JSON
	}
	if err := b.client.JSON(ctx, "TrentService.GetPublicKey", map[string]string{"KeyId": keyID}, &out); err != nil {
		return nil, fmt.Errorf(errorPrefix+"kms get public key of %s: %w", keyID, err)
	}
	rsaSpec := out.KeySpec == "RSA_2048" || out.KeySpec == "RSA_3072" || out.KeySpec == "RSA_4096"
	if !rsaSpec || out.KeyUsage != "SIGN_VERIFY" || !slices.Contains(out.SigningAlgorithms, rs256) {
		return nil, fmt.Errorf(errorPrefix+"KMS key %s is %s with usage %s, want an RSA_2048 (or larger) SIGN_VERIFY key that signs %s",
			keyID, out.KeySpec, out.KeyUsage, rs256)
	}
	pub, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf(errorPrefix+"KMS key %s: parse public key: %w", keyID, err)
	}
	return checkRSA(keyID, pub)
}

func (b *kmsBackend) signDigest(ctx context.Context, keyID string, digest []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, kmsTimeout)
	defer cancel()
	in := map[string]any{"KeyId": keyID, "Message": digest, "MessageType": "DIGEST", "SigningAlgorithm": rs256}
	var out struct{ Signature []byte }
	if err := b.client.JSON(ctx, "TrentService.Sign", in, &out); err != nil {
		return nil, fmt.Errorf(errorPrefix+"kms sign with %s: %w", keyID, err)
	}
	if len(out.Signature) == 0 {
		return nil, fmt.Errorf(errorPrefix+"kms sign with %s: no signature in the answer", keyID)
	}
	return out.Signature, nil
}

// keyFileID is the key ID of a key file issuer's only key.
const keyFileID = "file"

// fileBackend holds one RSA key read from a file.
type fileBackend struct {
	priv *rsa.PrivateKey
}

// loadKeyFile reads the key at path, or makes it when there is none.
func loadKeyFile(path string) (*fileBackend, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		data, err = createKeyFile(path)
		if errors.Is(err, fs.ErrExist) {
			// Another process made it first: use theirs.
			data, err = os.ReadFile(path)
		}
	}
	if err != nil {
		return nil, fmt.Errorf(errorPrefix+"key file: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf(errorPrefix+"key file %s: no PEM \"PRIVATE KEY\" block (PKCS #8)", path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf(errorPrefix+"key file %s: %w", path, err)
	}
	priv, ok := parsed.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf(errorPrefix+"key file %s holds a %T, want an RSA key", path, parsed)
	}
	if _, err := checkRSA(path, &priv.PublicKey); err != nil {
		return nil, err
	}
	return &fileBackend{priv: priv}, nil
}

// createKeyFile makes a 2048-bit RSA key and writes it to path, which must
// not exist (O_EXCL), readable by the owner only.
func createKeyFile(path string) ([]byte, error) {
	priv, err := rsa.GenerateKey(rand.Reader, minRSABits)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(data)
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		// A half-written key would fail every later start; remove it.
		os.Remove(path)
		return nil, err
	}
	return data, nil
}

func (b *fileBackend) publicKey(_ context.Context, _ string) (*rsa.PublicKey, error) {
	return &b.priv.PublicKey, nil
}

func (b *fileBackend) signDigest(_ context.Context, _ string, digest []byte) ([]byte, error) {
	return rsa.SignPKCS1v15(nil, b.priv, crypto.SHA256, digest)
}
