package fakekms

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"

	// Registers SHA-384 and SHA-512 for crypto.Hash.New.
	_ "crypto/sha512"

	"github.com/google/uuid"
)

// maxMessage is KMS's limit on Sign's Message, RAW or DIGEST.
const maxMessage = 4096

// rsaAlgorithm is a signing algorithm KMS offers for RSA keys.
type rsaAlgorithm struct {
	name string
	hash crypto.Hash
	pss  bool // RSASSA-PSS with a salt as long as the hash, else PKCS #1 v1.5
}

// rsaAlgorithms are the signing algorithms of an RSA SIGN_VERIFY key, in
// the order GetPublicKey lists them.
var rsaAlgorithms = []rsaAlgorithm{
	{"RSASSA_PKCS1_V1_5_SHA_256", crypto.SHA256, false},
	{"RSASSA_PKCS1_V1_5_SHA_384", crypto.SHA384, false},
	{"RSASSA_PKCS1_V1_5_SHA_512", crypto.SHA512, false},
	{"RSASSA_PSS_SHA_256", crypto.SHA256, true},
	{"RSASSA_PSS_SHA_384", crypto.SHA384, true},
	{"RSASSA_PSS_SHA_512", crypto.SHA512, true},
}

// otherAlgorithms are the rest of the SigningAlgorithm enum: valid in a
// request, but no RSA key supports them (InvalidKeyUsageException).
var otherAlgorithms = []string{
	"ECDSA_SHA_256", "ECDSA_SHA_384", "ECDSA_SHA_512", "SM2DSA",
	"ML_DSA_SHAKE_256", "ED25519_SHA_512", "ED25519_PH_SHA_512",
}

// AddSigningKey makes a new RSA_2048 key of KeyUsage SIGN_VERIFY and
// returns its ID (a UUID). Requests may name it by ID or by ARN.
func (f *KMS) AddSigningKey() string {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(fmt.Sprintf("fakekms: generate RSA key: %v", err))
	}
	id := uuid.NewString()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[id] = &fakeKey{signer: priv}
	return id
}

type getPublicKeyRequest struct {
	KeyId string
}

func (f *KMS) getPublicKey(w http.ResponseWriter, body []byte) {
	req, ok := decode[getPublicKeyRequest](w, body)
	if !ok {
		return
	}
	if req.KeyId == "" {
		writeError(w, http.StatusBadRequest, "ValidationException", nullMember("keyId"))
		return
	}
	id, k, ok := f.key(w, req.KeyId, "kms:GetPublicKey")
	if !ok {
		return
	}
	if k.signer == nil {
		writeError(w, http.StatusBadRequest, "UnsupportedOperationException", fmt.Sprintf(
			"%s key usage is ENCRYPT_DECRYPT with a symmetric key spec, which has no public key.", f.ARN(id)))
		return
	}
	der, err := x509.MarshalPKIXPublicKey(&k.signer.PublicKey)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "KMSInternalException", "marshal public key failed")
		return
	}
	algs := make([]string, len(rsaAlgorithms))
	for i, a := range rsaAlgorithms {
		algs[i] = a.name
	}
	writeJSON(w, map[string]any{
		"KeyId":                 f.ARN(id),
		"PublicKey":             der,
		"CustomerMasterKeySpec": "RSA_2048",
		"KeySpec":               "RSA_2048",
		"KeyUsage":              "SIGN_VERIFY",
		"SigningAlgorithms":     algs,
	})
}

type signRequest struct {
	KeyId            string
	Message          []byte
	MessageType      string
	SigningAlgorithm string
}

func (f *KMS) sign(w http.ResponseWriter, body []byte) {
	req, ok := decode[signRequest](w, body)
	if !ok {
		return
	}
	if msg := checkSign(req); msg != "" {
		writeError(w, http.StatusBadRequest, "ValidationException", msg)
		return
	}
	id, k, ok := f.key(w, req.KeyId, "kms:Sign")
	if !ok {
		return
	}
	if k.signer == nil {
		writeError(w, http.StatusBadRequest, "InvalidKeyUsageException", fmt.Sprintf(
			"%s key usage is ENCRYPT_DECRYPT which is not valid for signing.", f.ARN(id)))
		return
	}
	i := slices.IndexFunc(rsaAlgorithms, func(a rsaAlgorithm) bool { return a.name == req.SigningAlgorithm })
	if i < 0 {
		writeError(w, http.StatusBadRequest, "InvalidKeyUsageException", fmt.Sprintf(
			"Algorithm %s is incompatible with key spec RSA_2048.", req.SigningAlgorithm))
		return
	}
	alg := rsaAlgorithms[i]
	digest := req.Message
	if req.MessageType == "DIGEST" {
		if len(digest) != alg.hash.Size() {
			writeError(w, http.StatusBadRequest, "ValidationException", fmt.Sprintf(
				"Digest is invalid length for algorithm %s.", alg.name))
			return
		}
	} else {
		h := alg.hash.New()
		h.Write(req.Message)
		digest = h.Sum(nil)
	}
	sig, err := signDigest(k.signer, alg, digest)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "KMSInternalException", "sign failed")
		return
	}
	writeJSON(w, map[string]any{"KeyId": f.ARN(id), "Signature": sig, "SigningAlgorithm": alg.name})
}

// checkSign validates a Sign request as KMS does before it looks at the
// key, and returns a ValidationException message, or "". It defaults an
// empty MessageType to RAW, as KMS does.
func checkSign(req signRequest) string {
	switch {
	case req.KeyId == "":
		return nullMember("keyId")
	case req.Message == nil:
		return nullMember("message")
	case len(req.Message) == 0:
		return "1 validation error detected: Value at 'message' failed to satisfy constraint: Member must have length greater than or equal to 1"
	case len(req.Message) > maxMessage:
		return fmt.Sprintf("1 validation error detected: Value at 'message' failed to satisfy constraint: Member must have length less than or equal to %d", maxMessage)
	case req.SigningAlgorithm == "":
		return nullMember("signingAlgorithm")
	case req.MessageType != "" && req.MessageType != "RAW" && req.MessageType != "DIGEST" && req.MessageType != "EXTERNAL_MU":
		return fmt.Sprintf("1 validation error detected: Value '%s' at 'messageType' failed to satisfy constraint: Member must satisfy enum value set: [RAW, DIGEST, EXTERNAL_MU]", req.MessageType)
	}
	known := slices.Contains(otherAlgorithms, req.SigningAlgorithm) ||
		slices.ContainsFunc(rsaAlgorithms, func(a rsaAlgorithm) bool { return a.name == req.SigningAlgorithm })
	if !known {
		return fmt.Sprintf("1 validation error detected: Value '%s' at 'signingAlgorithm' failed to satisfy constraint: Member must satisfy enum value set", req.SigningAlgorithm)
	}
	if req.MessageType == "EXTERNAL_MU" {
		// Only ML-DSA keys take a precomputed mu.
		return "EXTERNAL_MU message type is only valid for ML_DSA_SHAKE_256."
	}
	return ""
}

func signDigest(priv *rsa.PrivateKey, alg rsaAlgorithm, digest []byte) ([]byte, error) {
	if alg.pss {
		return rsa.SignPSS(rand.Reader, priv, alg.hash, digest, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	}
	return rsa.SignPKCS1v15(nil, priv, alg.hash, digest)
}

func nullMember(name string) string {
	return fmt.Sprintf("1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", name)
}
