package secretbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/forgeci/forgeci/shared/awsenv"
)

// kmsContext is the EncryptionContext of every data key: KMS binds it into
// the ciphertext, and CloudTrail logs it, so a key policy or an auditor can
// tell these calls apart from any other use of the same KMS key.
var kmsContext = map[string]string{"purpose": "forgeci-project-secrets"}

// KMSKeyring wraps data keys with a KMS key. Its two calls are signed
// requests of KMS's JSON API (awsenv.Client), not the SDK's KMS client,
// which weighs 0.4 MB and 2 ms of package init in every bootstrap.
type KMSKeyring struct {
	client *awsenv.Client
	keyID  string
}

// NewKMSKeyring uses the KMS key keyID (a key ID, key ARN, alias name or
// alias ARN). Credentials and region come from the environment (see
// shared/awsenv); AWS_ENDPOINT_URL_KMS points the client elsewhere, which
// the tests use with fakekms. It makes no call to KMS.
func NewKMSKeyring(ctx context.Context, keyID string) (*KMSKeyring, error) {
	if keyID == "" {
		return nil, errors.New("secretbox: KMS key ID is empty")
	}
	client, err := awsenv.NewClient("kms", "KMS")
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	return &KMSKeyring{client: client, keyID: keyID}, nil
}

// ID is the key ID as configured.
func (k *KMSKeyring) ID() string { return k.keyID }

// GenerateDataKey asks KMS for an AES-256 data key.
func (k *KMSKeyring) GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error) {
	in := map[string]any{"KeyId": k.keyID, "KeySpec": "AES_256", "EncryptionContext": kmsContext}
	var out struct{ Plaintext, CiphertextBlob []byte } // base64 in the JSON
	if err := k.client.JSON(ctx, "TrentService.GenerateDataKey", in, &out); err != nil {
		return nil, nil, fmt.Errorf("secretbox: kms generate data key with %s: %w", k.keyID, err)
	}
	if len(out.Plaintext) != KeySize || len(out.CiphertextBlob) == 0 {
		return nil, nil, fmt.Errorf("secretbox: kms generate data key with %s: got a %d-byte key, want %d", k.keyID, len(out.Plaintext), KeySize)
	}
	return out.Plaintext, out.CiphertextBlob, nil
}

// Decrypt asks KMS to unwrap a data key. KeyId is passed so that a
// ciphertext of any other KMS key is refused (IncorrectKeyException)
// rather than quietly decrypted with a key this keyring does not name.
func (k *KMSKeyring) Decrypt(ctx context.Context, wrapped []byte) ([]byte, error) {
	in := map[string]any{"KeyId": k.keyID, "CiphertextBlob": wrapped, "EncryptionContext": kmsContext}
	var out struct{ Plaintext []byte }
	if err := k.client.JSON(ctx, "TrentService.Decrypt", in, &out); err != nil {
		return nil, fmt.Errorf("secretbox: kms decrypt with %s: %w", k.keyID, err)
	}
	if len(out.Plaintext) != KeySize {
		return nil, fmt.Errorf("secretbox: kms decrypt with %s: got a %d-byte key, want %d", k.keyID, len(out.Plaintext), KeySize)
	}
	return out.Plaintext, nil
}
