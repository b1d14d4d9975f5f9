package secretbox

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/forgeci/forgeci/shared/awsenv"
	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
)

// kmsMaxAttempts is how many times a KMS call is tried.
const kmsMaxAttempts = awsenv.MaxAttempts

// isKMS says whether err is KMS's error answer of type typ.
func isKMS(err error, typ string) bool {
	var e *awsenv.Error
	return errors.As(err, &e) && e.Type == typ
}

// setupKMS starts a fake KMS, points the environment at it and returns a
// keyring on its key.
func setupKMS(t *testing.T) (*KMSKeyring, *fakekms.KMS, string) {
	t.Helper()
	fake, keyID := fakekms.New(t)
	fake.SetEnv(t)
	k, err := NewKMSKeyring(context.Background(), keyID)
	if err != nil {
		t.Fatal(err)
	}
	return k, fake, keyID
}

func TestKMSKeyringRoundTrip(t *testing.T) {
	ctx := context.Background()
	k, fake, keyID := setupKMS(t)
	if k.ID() != keyID {
		t.Fatalf("ID = %s, want %s", k.ID(), keyID)
	}
	plain, wrapped := checkRoundTrip(t, k)
	// The key's ARN names the same key.
	byARN, err := NewKMSKeyring(ctx, fake.ARN(keyID))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := byARN.Decrypt(ctx, wrapped); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Decrypt by ARN: %v", err)
	}
	if g, d := fake.Calls(fakekms.OpGenerateDataKey), fake.Calls(fakekms.OpDecrypt); g != 1 || d != 2 {
		t.Fatalf("calls: GenerateDataKey %d, Decrypt %d; want 1 and 2", g, d)
	}
}

func TestKMSKeyringRefusesOtherKeys(t *testing.T) {
	ctx := context.Background()
	k, fake, _ := setupKMS(t)
	_, wrapped := newDataKey(t, k)

	other, err := NewKMSKeyring(ctx, fake.AddKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Decrypt(ctx, wrapped); !isKMS(err, "IncorrectKeyException") {
		t.Fatalf("another key's ciphertext: %v, want IncorrectKeyException", err)
	}

	missing, err := NewKMSKeyring(ctx, "00000000-0000-0000-0000-000000000000")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := missing.GenerateDataKey(ctx); !isKMS(err, "NotFoundException") {
		t.Fatalf("unknown key: %v, want NotFoundException", err)
	}
	if _, err := missing.Decrypt(ctx, wrapped); !isKMS(err, "NotFoundException") {
		t.Fatalf("unknown key: %v, want NotFoundException", err)
	}
}

func TestKMSKeyringRefusesTamperedKeys(t *testing.T) {
	ctx := context.Background()
	k, _, _ := setupKMS(t)
	_, wrapped := newDataKey(t, k)
	for i := range wrapped {
		bad := bytes.Clone(wrapped)
		bad[i] ^= 0x01
		if _, err := k.Decrypt(ctx, bad); !isKMS(err, "InvalidCiphertextException") {
			t.Fatalf("byte %d flipped: %v, want InvalidCiphertextException", i, err)
		}
	}
	if _, err := k.Decrypt(ctx, wrapped[:len(wrapped)-1]); !isKMS(err, "InvalidCiphertextException") {
		t.Fatalf("truncated: %v, want InvalidCiphertextException", err)
	}
}

// TestKMSEncryptionContext checks that the context is bound: the same
// ciphertext with another context does not decrypt, as in KMS.
func TestKMSEncryptionContext(t *testing.T) {
	ctx := context.Background()
	k, _, _ := setupKMS(t)
	_, wrapped := newDataKey(t, k)
	for _, encCtx := range []map[string]string{nil, {"purpose": "something-else"}, {"purpose": "forgeci-project-secrets", "x": "y"}} {
		var out struct{ Plaintext []byte }
		err := k.client.JSON(ctx, "TrentService.Decrypt", map[string]any{"KeyId": k.keyID, "CiphertextBlob": wrapped,
			"EncryptionContext": encCtx}, &out)
		if !isKMS(err, "InvalidCiphertextException") {
			t.Fatalf("context %v: %v, want InvalidCiphertextException", encCtx, err)
		}
	}
}

func TestKMSAccessDeniedIsNotRetried(t *testing.T) {
	ctx := context.Background()
	k, fake, keyID := setupKMS(t)
	fake.Deny(keyID, true)
	if _, _, err := k.GenerateDataKey(ctx); !isKMS(err, "AccessDeniedException") {
		t.Fatalf("err = %v, want AccessDeniedException", err)
	}
	if n := fake.Calls(fakekms.OpGenerateDataKey); n != 1 {
		t.Fatalf("%d GenerateDataKey calls, want 1 (a refusal is final)", n)
	}
}

// TestKMSDroppedResponses: the client treats a connection closed without a
// response as a retryable connection error, and KMS's operations are safe
// to repeat, so one lost response is absorbed by a retry; only losing
// every attempt reaches the caller, and the next call then works.
func TestKMSDroppedResponses(t *testing.T) {
	ctx := context.Background()
	k, fake, _ := setupKMS(t)
	plain, wrapped := newDataKey(t, k)

	fake.DropResponses(fakekms.OpDecrypt, 1)
	got, err := k.Decrypt(ctx, wrapped)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("one dropped response: %v, want the retry to succeed", err)
	}
	if n := fake.Calls(fakekms.OpDecrypt); n != 2 {
		t.Fatalf("%d Decrypt calls, want 2 (the dropped one and the retry)", n)
	}

	fake.DropResponses(fakekms.OpDecrypt, kmsMaxAttempts)
	if _, err := k.Decrypt(ctx, wrapped); err == nil {
		t.Fatal("every response dropped, and Decrypt succeeded")
	}
	if n := fake.Calls(fakekms.OpDecrypt); n != 2+kmsMaxAttempts {
		t.Fatalf("%d Decrypt calls, want %d", n, 2+kmsMaxAttempts)
	}
	if got, err := k.Decrypt(ctx, wrapped); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("after the drops: %v", err)
	}

	fake.DropResponses(fakekms.OpGenerateDataKey, kmsMaxAttempts)
	if _, _, err := k.GenerateDataKey(ctx); err == nil {
		t.Fatal("every response dropped, and GenerateDataKey succeeded")
	}
	if _, _, err := k.GenerateDataKey(ctx); err != nil {
		t.Fatalf("after the drops: %v", err)
	}
}

// TestKMSDown: a failing KMS is retried kmsMaxAttempts times in all, then
// reported; it works again once KMS is back.
func TestKMSDown(t *testing.T) {
	ctx := context.Background()
	k, fake, _ := setupKMS(t)
	fake.SetDown(true)
	if _, _, err := k.GenerateDataKey(ctx); !isKMS(err, "KMSInternalException") {
		t.Fatalf("err = %v, want KMSInternalException", err)
	}
	if n := fake.Calls(fakekms.OpGenerateDataKey); n != kmsMaxAttempts {
		t.Fatalf("%d GenerateDataKey calls, want %d", n, kmsMaxAttempts)
	}
	fake.SetDown(false)
	if _, _, err := k.GenerateDataKey(ctx); err != nil {
		t.Fatalf("after SetDown(false): %v", err)
	}
}

func TestNewKMSKeyringNeedsCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := NewKMSKeyring(context.Background(), "alias/forgeci"); err == nil {
		t.Fatal("no credentials, and no error")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example")
	if _, err := NewKMSKeyring(context.Background(), ""); err == nil {
		t.Fatal("empty key ID, and no error")
	}
}
