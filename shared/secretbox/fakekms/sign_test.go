package fakekms

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"
)

// sdkClient is a real KMS client pointed at the fake.
func sdkClient(fake *KMS) *kms.Client {
	return kms.New(kms.Options{
		Region:           Region,
		Credentials:      credentials.NewStaticCredentialsProvider("AKIAFAKE", "secret", ""),
		BaseEndpoint:     aws.String(fake.URL()),
		RetryMaxAttempts: 1,
	})
}

// publicKey fetches and parses the public key of id through the SDK.
func publicKey(t *testing.T, client *kms.Client, id string) (*rsa.PublicKey, *kms.GetPublicKeyOutput) {
	t.Helper()
	out, err := client.GetPublicKey(context.Background(), &kms.GetPublicKeyInput{KeyId: aws.String(id)})
	if err != nil {
		t.Fatalf("GetPublicKey: %v", err)
	}
	parsed, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		t.Fatalf("PublicKey is not a DER SubjectPublicKeyInfo: %v", err)
	}
	pub, ok := parsed.(*rsa.PublicKey)
	if !ok || pub.N.BitLen() != 2048 {
		t.Fatalf("public key %T, want a 2048-bit RSA key", parsed)
	}
	return pub, out
}

func TestGetPublicKey(t *testing.T) {
	fake, _ := New(t)
	id := fake.AddSigningKey()
	client := sdkClient(fake)
	_, out := publicKey(t, client, fake.ARN(id)) // by ARN
	if aws.ToString(out.KeyId) != fake.ARN(id) || out.KeySpec != types.KeySpecRsa2048 || out.KeyUsage != types.KeyUsageTypeSignVerify {
		t.Fatalf("KeyId %s, KeySpec %s, KeyUsage %s", aws.ToString(out.KeyId), out.KeySpec, out.KeyUsage)
	}
	for _, want := range []types.SigningAlgorithmSpec{types.SigningAlgorithmSpecRsassaPkcs1V15Sha256, types.SigningAlgorithmSpecRsassaPssSha256} {
		found := false
		for _, a := range out.SigningAlgorithms {
			found = found || a == want
		}
		if !found {
			t.Fatalf("SigningAlgorithms %v lack %s", out.SigningAlgorithms, want)
		}
	}
	other := fake.AddSigningKey()
	otherPub, _ := publicKey(t, client, other)
	pub, _ := publicKey(t, client, id)
	if pub.Equal(otherPub) {
		t.Fatal("two signing keys share a public key")
	}
	if n := fake.Calls(OpGetPublicKey); n != 3 {
		t.Fatalf("%d GetPublicKey calls counted, want 3", n)
	}
}

// TestSignVerifies signs through the SDK with each message type and
// algorithm, and checks every signature with crypto/rsa.
func TestSignVerifies(t *testing.T) {
	fake, _ := New(t)
	id := fake.AddSigningKey()
	client := sdkClient(fake)
	pub, _ := publicKey(t, client, id)
	msg := []byte("header.payload")
	sum256 := sha256.Sum256(msg)
	sum512 := sha512.Sum512(msg)
	pss := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}
	tests := []struct {
		name    string
		alg     types.SigningAlgorithmSpec
		typ     types.MessageType
		message []byte
		verify  func(sig []byte) error
	}{
		{"PKCS1 SHA-256 digest", types.SigningAlgorithmSpecRsassaPkcs1V15Sha256, types.MessageTypeDigest, sum256[:],
			func(sig []byte) error { return rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum256[:], sig) }},
		{"PKCS1 SHA-256 raw", types.SigningAlgorithmSpecRsassaPkcs1V15Sha256, "", msg,
			func(sig []byte) error { return rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum256[:], sig) }},
		{"PKCS1 SHA-512 raw", types.SigningAlgorithmSpecRsassaPkcs1V15Sha512, types.MessageTypeRaw, msg,
			func(sig []byte) error { return rsa.VerifyPKCS1v15(pub, crypto.SHA512, sum512[:], sig) }},
		{"PSS SHA-256 digest", types.SigningAlgorithmSpecRsassaPssSha256, types.MessageTypeDigest, sum256[:],
			func(sig []byte) error { return rsa.VerifyPSS(pub, crypto.SHA256, sum256[:], sig, pss) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := client.Sign(context.Background(), &kms.SignInput{
				KeyId: aws.String(id), Message: tt.message, MessageType: tt.typ, SigningAlgorithm: tt.alg,
			})
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if aws.ToString(out.KeyId) != fake.ARN(id) || out.SigningAlgorithm != tt.alg {
				t.Fatalf("KeyId %s, SigningAlgorithm %s", aws.ToString(out.KeyId), out.SigningAlgorithm)
			}
			if err := tt.verify(out.Signature); err != nil {
				t.Fatalf("signature does not verify: %v", err)
			}
		})
	}
}

// TestSignErrors checks that the SDK sees KMS's typed errors.
func TestSignErrors(t *testing.T) {
	fake, symmetric := New(t)
	id := fake.AddSigningKey()
	denied := fake.AddSigningKey()
	fake.Deny(denied, true)
	client := sdkClient(fake)
	digest := sha256.Sum256([]byte("m"))
	sign := func(key string, msg []byte, typ types.MessageType, alg types.SigningAlgorithmSpec) error {
		_, err := client.Sign(context.Background(), &kms.SignInput{
			KeyId: aws.String(key), Message: msg, MessageType: typ, SigningAlgorithm: alg})
		return err
	}
	pkcs1 := types.SigningAlgorithmSpecRsassaPkcs1V15Sha256
	tests := []struct {
		name, wantCode string
		err            error
	}{
		{"unknown key", "NotFoundException", sign("6f1c2d9e-0000-4000-8000-000000000000", digest[:], types.MessageTypeDigest, pkcs1)},
		{"symmetric key", "InvalidKeyUsageException", sign(symmetric, digest[:], types.MessageTypeDigest, pkcs1)},
		{"ECDSA on an RSA key", "InvalidKeyUsageException", sign(id, digest[:], types.MessageTypeDigest, types.SigningAlgorithmSpecEcdsaSha256)},
		{"digest too short", "ValidationException", sign(id, digest[:31], types.MessageTypeDigest, pkcs1)},
		{"SHA-256 digest for SHA-512", "ValidationException", sign(id, digest[:], types.MessageTypeDigest, types.SigningAlgorithmSpecRsassaPkcs1V15Sha512)},
		{"message over 4096 bytes", "ValidationException", sign(id, make([]byte, 4097), types.MessageTypeRaw, pkcs1)},
		{"denied", "AccessDeniedException", sign(denied, digest[:], types.MessageTypeDigest, pkcs1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code := errorCode(tt.err); code != tt.wantCode {
				t.Fatalf("err = %v, want %s", tt.err, tt.wantCode)
			}
		})
	}
	// The SDK maps these to its typed errors.
	var notFound *types.NotFoundException
	var usage *types.InvalidKeyUsageException
	if !errors.As(tests[0].err, &notFound) || !errors.As(tests[1].err, &usage) {
		t.Fatalf("untyped errors: %T, %T", tests[0].err, tests[1].err)
	}
	if err := sign(id, make([]byte, 4096), types.MessageTypeRaw, pkcs1); err != nil {
		t.Fatalf("4096-byte message: %v", err)
	}
	var unsupported *types.UnsupportedOperationException
	if _, err := client.GetPublicKey(context.Background(), &kms.GetPublicKeyInput{KeyId: aws.String(symmetric)}); !errors.As(err, &unsupported) {
		t.Fatalf("GetPublicKey of a symmetric key: %v, want UnsupportedOperationException", err)
	}
	if _, err := client.GetPublicKey(context.Background(), &kms.GetPublicKeyInput{KeyId: aws.String("nope")}); !errors.As(err, &notFound) {
		t.Fatalf("GetPublicKey of an unknown key: %v, want NotFoundException", err)
	}
	if _, err := client.GetPublicKey(context.Background(), &kms.GetPublicKeyInput{KeyId: aws.String(denied)}); errorCode(err) != "AccessDeniedException" {
		t.Fatalf("GetPublicKey of a denied key: %v, want AccessDeniedException", err)
	}
	_, err := client.GenerateDataKey(context.Background(), &kms.GenerateDataKeyInput{KeyId: aws.String(id), KeySpec: types.DataKeySpecAes256})
	if !errors.As(err, &usage) {
		t.Fatalf("GenerateDataKey with a signing key: %v, want InvalidKeyUsageException", err)
	}
}

// errorCode is the KMS error name of err, or "".
func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// TestSignValidation covers requests the SDK would refuse to send.
func TestSignValidation(t *testing.T) {
	fake, _ := New(t)
	id := fake.AddSigningKey()
	digest := base64.StdEncoding.EncodeToString(make([]byte, 32))
	tests := []struct{ name, body, wantType string }{
		{"no key", `{"Message":"` + digest + `","MessageType":"DIGEST","SigningAlgorithm":"RSASSA_PKCS1_V1_5_SHA_256"}`, "ValidationException"},
		{"no message", `{"KeyId":"` + id + `","SigningAlgorithm":"RSASSA_PKCS1_V1_5_SHA_256"}`, "ValidationException"},
		{"empty message", `{"KeyId":"` + id + `","Message":"","SigningAlgorithm":"RSASSA_PKCS1_V1_5_SHA_256"}`, "ValidationException"},
		{"no algorithm", `{"KeyId":"` + id + `","Message":"` + digest + `","MessageType":"DIGEST"}`, "ValidationException"},
		{"unknown algorithm", `{"KeyId":"` + id + `","Message":"` + digest + `","SigningAlgorithm":"RS256"}`, "ValidationException"},
		{"unknown message type", `{"KeyId":"` + id + `","Message":"` + digest + `","MessageType":"HASH","SigningAlgorithm":"RSASSA_PKCS1_V1_5_SHA_256"}`, "ValidationException"},
		{"not base64", `{"KeyId":"` + id + `","Message":"%%%","SigningAlgorithm":"RSASSA_PKCS1_V1_5_SHA_256"}`, "SerializationException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := call[struct {
				Type string `json:"__type"`
			}](t, fake, "TrentService.Sign", "application/x-amz-json-1.1", sigV4, tt.body)
			if status != http.StatusBadRequest || got.Type != tt.wantType {
				t.Fatalf("answer %d %s, want 400 %s", status, got.Type, tt.wantType)
			}
		})
	}
	status, got := call[struct{ Signature []byte }](t, fake, "TrentService.Sign", "application/x-amz-json-1.1", sigV4,
		`{"KeyId":"`+fake.ARN(id)+`","Message":"`+digest+`","MessageType":"DIGEST","SigningAlgorithm":"RSASSA_PKCS1_V1_5_SHA_256"}`)
	if status != http.StatusOK || len(got.Signature) != 256 {
		t.Fatalf("valid request: %d, %d-byte signature", status, len(got.Signature))
	}
}

// TestSignFaults: the fault switches apply to the new operations.
func TestSignFaults(t *testing.T) {
	fake, _ := New(t)
	id := fake.AddSigningKey()
	client := sdkClient(fake)
	fake.DropResponses(OpSign, 1)
	digest := sha256.Sum256([]byte("m"))
	_, err := client.Sign(context.Background(), &kms.SignInput{KeyId: aws.String(id), Message: digest[:],
		MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecRsassaPkcs1V15Sha256})
	if err == nil || strings.Contains(err.Error(), "Exception") {
		t.Fatalf("dropped response with one attempt: %v, want a connection error", err)
	}
	fake.SetDown(true)
	var internal *types.KMSInternalException
	if _, err := client.GetPublicKey(context.Background(), &kms.GetPublicKeyInput{KeyId: aws.String(id)}); !errors.As(err, &internal) {
		t.Fatalf("down: %v, want KMSInternalException", err)
	}
	fake.SetDown(false)
	publicKey(t, client, id)
	if fake.Calls(OpSign) != 1 || fake.Calls(OpGetPublicKey) != 2 {
		t.Fatalf("calls: Sign %d, GetPublicKey %d", fake.Calls(OpSign), fake.Calls(OpGetPublicKey))
	}
}
