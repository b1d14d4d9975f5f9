// Package fakekms is an httptest fake of the AWS KMS operations ForgeCI
// uses, GenerateDataKey and Decrypt with symmetric keys, and GetPublicKey
// and Sign with RSA signing keys (sign.go), speaking the service's JSON 1.1
// protocol closely enough for the real SDK client: POST / with
// X-Amz-Target TrentService.<op>, base64 blobs in JSON, and errors as
// {"__type": ..., "message": ...} with KMS's status codes, so the SDK maps
// them to its typed errors.
//
// Its ciphertext blobs name their key and are sealed under that key's
// secret material, so only this fake decrypts them; the EncryptionContext is
// bound into the seal, as in KMS. It records calls per operation and injects
// faults: the whole service failing, or a request applied and its response
// then lost (the connection closed).
//
// SetEnv points NewKMSKeyring (via AWS_ENDPOINT_URL_KMS) at the fake.
package fakekms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/forgeci/forgeci/shared/fakefault"
)

// Region and Account make up the key ARNs the fake answers with.
const (
	Region  = "us-east-1"
	Account = "111122223333"
)

// Operation names, as used by DropResponses and Calls.
const (
	OpGenerateDataKey = "GenerateDataKey"
	OpDecrypt         = "Decrypt"
	OpSign            = "Sign"
	OpGetPublicKey    = "GetPublicKey"
)

// KMS is the fake.
type KMS struct {
	Server *httptest.Server

	mu     sync.Mutex
	keys   map[string]*fakeKey // key ID -> the key
	denied map[string]bool     // key ID -> callers are refused (AccessDeniedException)
	calls  map[string]int      // operation -> requests received
	// SetDown makes every request answer 500 KMSInternalException. That
	// is what KMS answers when it fails on its side, and the SDK maps it
	// to *types.KMSInternalException; the SDK's standard retryer retries
	// it (every 500 is retryable), so a client sees the error only after
	// its last attempt. DropResponses takes an operation (OpGenerateDataKey,
	// OpDecrypt, OpSign or OpGetPublicKey).
	fakefault.Switches
}

// fakeKey is a KMS key: a symmetric one (ENCRYPT_DECRYPT) has material, a
// signing one (SIGN_VERIFY, RSA_2048) has signer.
type fakeKey struct {
	material []byte
	signer   *rsa.PrivateKey
}

// New starts a fake KMS holding one key, whose ID it returns; the server
// stops with the test.
func New(t testing.TB) (*KMS, string) {
	f := &KMS{keys: map[string]*fakeKey{}, denied: map[string]bool{}, calls: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.Server.Close)
	return f, f.AddKey()
}

// URL is the endpoint to give the client (AWS_ENDPOINT_URL_KMS).
func (f *KMS) URL() string { return f.Server.URL }

// SetEnv points AWS SDK clients built by shared/awsenv at the fake, with
// throwaway credentials, for the rest of the test.
func (f *KMS) SetEnv(t testing.TB) {
	t.Setenv("AWS_ENDPOINT_URL_KMS", f.URL())
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEKMSEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fake-kms-secret-access-key")
	t.Setenv("AWS_SESSION_TOKEN", "")
}

// AddKey makes a new symmetric key and returns its ID (a UUID, as KMS's
// are). Requests may name it by ID or by ARN.
func (f *KMS) AddKey() string {
	material := make([]byte, 32)
	_, _ = rand.Read(material)
	id := uuid.NewString()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[id] = &fakeKey{material: material}
	return id
}

// ARN is the key ARN of key ID id.
func (f *KMS) ARN(id string) string {
	return fmt.Sprintf("arn:aws:kms:%s:%s:key/%s", Region, Account, id)
}

// Deny makes every use of key id answer AccessDeniedException (true), as
// when the caller's role lacks kms:Decrypt, or work again (false).
func (f *KMS) Deny(id string, deny bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.denied[id] = deny
}

// Calls counts the requests of op received so far, whether answered,
// failed by SetDown or dropped. SDK retries count separately.
func (f *KMS) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// handle applies the fault switches, then serves the request.
func (f *KMS) handle(w http.ResponseWriter, r *http.Request) {
	op, _ := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "TrentService.")
	f.mu.Lock()
	f.calls[op]++
	f.mu.Unlock()
	down, drop := f.Next(op)
	switch {
	case down:
		writeError(w, http.StatusInternalServerError, "KMSInternalException", "The request was rejected because an internal exception occurred. The request can be retried.")
	case drop:
		fakefault.Drop(w, func(w http.ResponseWriter) { f.serve(w, r, op) })
	default:
		f.serve(w, r, op)
	}
}

// serve checks what every KMS request must carry, then runs op.
func (f *KMS) serve(w http.ResponseWriter, r *http.Request, op string) {
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "":
		writeError(w, http.StatusBadRequest, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	case !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !strings.Contains(auth, "/kms/aws4_request"):
		// Only the form is checked: a SigV4 signature for the kms service.
		writeError(w, http.StatusBadRequest, "IncompleteSignatureException", "Authorization header is not a SigV4 signature for kms")
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		writeError(w, http.StatusBadRequest, "UnknownOperationException", "")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		writeError(w, http.StatusBadRequest, "SerializationException", "Content-Type must be application/x-amz-json-1.1")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", "cannot read request body")
		return
	}
	switch op {
	case OpGenerateDataKey:
		f.generateDataKey(w, body)
	case OpDecrypt:
		f.decrypt(w, body)
	case OpSign:
		f.sign(w, body)
	case OpGetPublicKey:
		f.getPublicKey(w, body)
	default:
		writeError(w, http.StatusBadRequest, "UnknownOperationException", "")
	}
}

type generateDataKeyRequest struct {
	KeyId             string
	KeySpec           string
	NumberOfBytes     *int
	EncryptionContext map[string]string
}

func (f *KMS) generateDataKey(w http.ResponseWriter, body []byte) {
	req, ok := decode[generateDataKeyRequest](w, body)
	if !ok {
		return
	}
	size, msg := checkGenerateDataKey(req)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "ValidationException", msg)
		return
	}
	id, k, ok := f.key(w, req.KeyId, "kms:GenerateDataKey")
	if !ok {
		return
	}
	if k.signer != nil {
		writeError(w, http.StatusBadRequest, "InvalidKeyUsageException", fmt.Sprintf(
			"%s key usage is SIGN_VERIFY which is not valid for GenerateDataKey.", f.ARN(id)))
		return
	}
	plain := make([]byte, size)
	_, _ = rand.Read(plain)
	blob, err := seal(id, k.material, plain, req.EncryptionContext)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "KMSInternalException", "seal failed")
		return
	}
	// []byte fields encode as standard base64, the protocol's blob form.
	writeJSON(w, map[string]any{"CiphertextBlob": blob, "Plaintext": plain, "KeyId": f.ARN(id)})
}

// checkGenerateDataKey validates a request as KMS does (a key, and exactly
// one of KeySpec and NumberOfBytes) and returns the data key size, or a
// ValidationException message.
func checkGenerateDataKey(req generateDataKeyRequest) (int, string) {
	if req.KeyId == "" {
		return 0, "1 validation error detected: Value null at 'keyId' failed to satisfy constraint: Member must not be null"
	}
	if (req.KeySpec == "") == (req.NumberOfBytes == nil) {
		return 0, "Please specify either number of bytes or key spec."
	}
	switch {
	case req.KeySpec == "AES_256":
		return 32, ""
	case req.KeySpec == "AES_128":
		return 16, ""
	case req.KeySpec != "":
		return 0, fmt.Sprintf("1 validation error detected: Value '%s' at 'keySpec' failed to satisfy constraint: Member must satisfy enum value set: [AES_256, AES_128]", req.KeySpec)
	case *req.NumberOfBytes < 1 || *req.NumberOfBytes > 1024:
		return 0, "1 validation error detected: Value at 'numberOfBytes' failed to satisfy constraint: Member must have value between 1 and 1024"
	}
	return *req.NumberOfBytes, ""
}

type decryptRequest struct {
	CiphertextBlob    []byte
	KeyId             string
	EncryptionContext map[string]string
}

func (f *KMS) decrypt(w http.ResponseWriter, body []byte) {
	req, ok := decode[decryptRequest](w, body)
	if !ok {
		return
	}
	if req.KeyId != "" {
		if _, ok := f.resolve(req.KeyId); !ok {
			writeError(w, http.StatusBadRequest, "NotFoundException", fmt.Sprintf("Key '%s' does not exist", req.KeyId))
			return
		}
	}
	blobID, err := blobKeyID(req.CiphertextBlob)
	if _, known := f.resolve(blobID); err != nil || !known {
		writeError(w, http.StatusBadRequest, "InvalidCiphertextException", "")
		return
	}
	if req.KeyId != "" {
		if id, _ := f.resolve(req.KeyId); id != blobID {
			writeError(w, http.StatusBadRequest, "IncorrectKeyException",
				"The key ID in the request does not identify a CMK that can perform this operation.")
			return
		}
	}
	id, k, ok := f.key(w, blobID, "kms:Decrypt")
	if !ok {
		return
	}
	// A signing key's nil material fails open, as a forged blob should.
	plain, err := open(id, k.material, req.CiphertextBlob, req.EncryptionContext)
	if err != nil {
		// A wrong EncryptionContext lands here too, as in KMS.
		writeError(w, http.StatusBadRequest, "InvalidCiphertextException", "")
		return
	}
	writeJSON(w, map[string]any{"Plaintext": plain, "KeyId": f.ARN(id), "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"})
}

// decode parses a request body; when it cannot, it answers
// SerializationException itself and returns !ok.
func decode[T any](w http.ResponseWriter, body []byte) (T, bool) {
	var req T
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", "cannot parse request body")
		return req, false
	}
	return req, true
}

// resolve turns a key ID or key ARN into a known key ID.
func (f *KMS) resolve(ref string) (string, bool) {
	id := strings.TrimPrefix(ref, fmt.Sprintf("arn:aws:kms:%s:%s:key/", Region, Account))
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.keys[id]
	return id, ok
}

// key looks up a key for action; when it cannot be used it answers
// NotFoundException or AccessDeniedException itself and returns !ok.
func (f *KMS) key(w http.ResponseWriter, ref, action string) (id string, k *fakeKey, ok bool) {
	id, ok = f.resolve(ref)
	if !ok {
		writeError(w, http.StatusBadRequest, "NotFoundException", fmt.Sprintf("Key '%s' does not exist", ref))
		return "", nil, false
	}
	f.mu.Lock()
	k, denied := f.keys[id], f.denied[id]
	f.mu.Unlock()
	if denied {
		writeError(w, http.StatusBadRequest, "AccessDeniedException", fmt.Sprintf(
			"User: arn:aws:sts::%s:assumed-role/fake/fake is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
			Account, action, f.ARN(id), action))
		return "", nil, false
	}
	return id, k, true
}

// A ciphertext blob is: 1 version byte, 1 byte of key ID length, the key
// ID, a 12-byte nonce, then AES-256-GCM under the key's material with the
// key ID and the encryption context as additional data.
const blobVersion = 1

func seal(id string, material, plain []byte, encCtx map[string]string) ([]byte, error) {
	aead, err := newGCM(material)
	if err != nil {
		return nil, err
	}
	blob := append([]byte{blobVersion, byte(len(id))}, id...)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	blob = append(blob, nonce...)
	return aead.Seal(blob, nonce, plain, additionalData(id, encCtx)), nil
}

func open(id string, material, blob []byte, encCtx map[string]string) ([]byte, error) {
	aead, err := newGCM(material)
	if err != nil {
		return nil, err
	}
	rest := blob[2+len(id):]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, errors.New("short blob")
	}
	return aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], additionalData(id, encCtx))
}

// blobKeyID reads the key ID a blob names.
func blobKeyID(blob []byte) (string, error) {
	if len(blob) < 2 || blob[0] != blobVersion || len(blob) < 2+int(blob[1]) {
		return "", errors.New("not a fake KMS ciphertext")
	}
	return string(blob[2 : 2+int(blob[1])]), nil
}

// additionalData binds the key ID and the encryption context. JSON of a
// map has sorted keys, so equal contexts give equal bytes; an empty context
// and a missing one are the same, as in KMS.
func additionalData(id string, encCtx map[string]string) []byte {
	if len(encCtx) == 0 {
		encCtx = nil
	}
	ctxJSON, _ := json.Marshal(encCtx)
	return append(append([]byte(id), 0), ctxJSON...)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("x-amzn-RequestId", uuid.NewString())
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as KMS does: the error's name in __type, which the
// SDK turns into its typed error (for example *types.NotFoundException).
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("x-amzn-RequestId", uuid.NewString())
	w.WriteHeader(status)
	body := map[string]string{"__type": typ}
	if msg != "" {
		body["message"] = msg
	}
	_ = json.NewEncoder(w).Encode(body)
}
