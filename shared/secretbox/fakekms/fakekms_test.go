package fakekms

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestRefusesUnsignedRequests checks the protocol checks made before any
// operation runs; the SDK's own requests are tested in shared/secretbox.
func TestRefusesUnsignedRequests(t *testing.T) {
	fake, keyID := New(t)
	body := `{"KeyId":"` + keyID + `","KeySpec":"AES_256"}`
	tests := []struct {
		name, auth, target, contentType string
		wantType                        string
	}{
		{"no signature", "", "TrentService.GenerateDataKey", "application/x-amz-json-1.1", "MissingAuthenticationTokenException"},
		{"not SigV4", "Bearer x", "TrentService.GenerateDataKey", "application/x-amz-json-1.1", "IncompleteSignatureException"},
		{"signed for another service", "AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
			"TrentService.GenerateDataKey", "application/x-amz-json-1.1", "IncompleteSignatureException"},
		{"wrong content type", sigV4, "TrentService.GenerateDataKey", "application/json", "SerializationException"},
		{"unknown operation", sigV4, "TrentService.Encrypt", "application/x-amz-json-1.1", "UnknownOperationException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := call[struct {
				Type string `json:"__type"`
			}](t, fake, tt.target, tt.contentType, tt.auth, body)
			if status != http.StatusBadRequest || got.Type != tt.wantType {
				t.Fatalf("answer %d %s, want 400 %s", status, got.Type, tt.wantType)
			}
		})
	}
	if n := fake.Calls(OpGenerateDataKey); n != 4 {
		t.Fatalf("%d GenerateDataKey calls counted, want 4", n)
	}
}

// sigV4 has the form of a SigV4 Authorization header for KMS; the fake
// checks the form only.
const sigV4 = "AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=00"

func TestGenerateDataKeyValidation(t *testing.T) {
	fake, keyID := New(t)
	tests := []struct {
		name, body string
		status     int
		wantType   string
	}{
		{"AES_256", `{"KeyId":"` + keyID + `","KeySpec":"AES_256"}`, 200, ""},
		{"by ARN", `{"KeyId":"` + fake.ARN(keyID) + `","NumberOfBytes":64}`, 200, ""},
		{"both spec and bytes", `{"KeyId":"` + keyID + `","KeySpec":"AES_256","NumberOfBytes":32}`, 400, "ValidationException"},
		{"neither", `{"KeyId":"` + keyID + `"}`, 400, "ValidationException"},
		{"bad spec", `{"KeyId":"` + keyID + `","KeySpec":"AES_512"}`, 400, "ValidationException"},
		{"no key", `{"KeySpec":"AES_256"}`, 400, "ValidationException"},
		{"unknown key", `{"KeyId":"alias/nope","KeySpec":"AES_256"}`, 400, "NotFoundException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := call[struct {
				Type           string `json:"__type"`
				Plaintext      []byte
				CiphertextBlob []byte
				KeyId          string
			}](t, fake, "TrentService.GenerateDataKey", "application/x-amz-json-1.1", sigV4, tt.body)
			if status != tt.status || got.Type != tt.wantType {
				t.Fatalf("answer %d %q, want %d %q", status, got.Type, tt.status, tt.wantType)
			}
			if tt.status == 200 && (len(got.Plaintext) == 0 || len(got.CiphertextBlob) == 0 || got.KeyId != fake.ARN(keyID)) {
				t.Fatalf("incomplete answer: %d-byte key, %d-byte blob, key %s", len(got.Plaintext), len(got.CiphertextBlob), got.KeyId)
			}
		})
	}
}

// call posts body to the fake as operation target (the X-Amz-Target
// header), with contentType and auth (no Authorization when empty), and
// decodes the answer into a T.
func call[T any](t *testing.T, fake *KMS, target, contentType, auth, body string) (status int, got T) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fake.URL()+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", target)
	req.Header.Set("Content-Type", contentType)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, got
}
