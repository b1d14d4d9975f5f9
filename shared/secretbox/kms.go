package secretbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/forgeci/forgeci/shared/awsenv"
)

// kmsContext is the EncryptionContext of every data key: KMS binds it into
// the ciphertext, and CloudTrail logs it, so a key policy or an auditor can
// tell these calls apart from any other use of the same KMS key.
var kmsContext = map[string]string{"purpose": "forgeci-project-secrets"}

// kmsMaxAttempts bounds the SDK's own retries (with its default backoff of
// at most 50 ms and 100 ms between them), so an unreachable KMS fails a
// request in well under a second instead of holding it.
const kmsMaxAttempts = 3

// KMSKeyring wraps data keys with a KMS key.
type KMSKeyring struct {
	client *kms.Client
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
	cfg, err := awsenv.Config("", "", "")
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	client := kms.NewFromConfig(cfg, func(o *kms.Options) {
		o.BaseEndpoint = awsenv.Endpoint("KMS")
		o.RetryMaxAttempts = kmsMaxAttempts
	})
	return &KMSKeyring{client: client, keyID: keyID}, nil
}

// ID is the key ID as configured.
func (k *KMSKeyring) ID() string { return k.keyID }

// GenerateDataKey asks KMS for an AES-256 data key.
func (k *KMSKeyring) GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error) {
	out, err := k.client.GenerateDataKey(ctx, &kms.GenerateDataKeyInput{
		KeyId:             aws.String(k.keyID),
		KeySpec:           types.DataKeySpecAes256,
		EncryptionContext: kmsContext,
	})
	if err != nil {
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
	out, err := k.client.Decrypt(ctx, &kms.DecryptInput{
		KeyId:             aws.String(k.keyID),
		CiphertextBlob:    wrapped,
		EncryptionContext: kmsContext,
	})
	if err != nil {
		return nil, fmt.Errorf("secretbox: kms decrypt with %s: %w", k.keyID, err)
	}
	if len(out.Plaintext) != KeySize {
		return nil, fmt.Errorf("secretbox: kms decrypt with %s: got a %d-byte key, want %d", k.keyID, len(out.Plaintext), KeySize)
	}
	return out.Plaintext, nil
}
