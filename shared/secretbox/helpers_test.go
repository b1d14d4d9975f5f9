package secretbox

import (
	"bytes"
	"context"
	"testing"
)

// newDataKey makes a data key with k, failing the test if it cannot.
func newDataKey(t *testing.T, k Keyring) (plain, wrapped []byte) {
	t.Helper()
	plain, wrapped, err := k.GenerateDataKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return plain, wrapped
}

// checkRoundTrip makes a data key with k and checks it: KeySize bytes, not
// visible in its wrapped form, and unwrapped by k to itself.
func checkRoundTrip(t *testing.T, k Keyring) (plain, wrapped []byte) {
	t.Helper()
	plain, wrapped = newDataKey(t, k)
	if len(plain) != KeySize || bytes.Contains(wrapped, plain) {
		t.Fatalf("data key is %d bytes, or visible in its wrapped form", len(plain))
	}
	got, err := k.Decrypt(context.Background(), wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatal("Decrypt returned another key")
	}
	return plain, wrapped
}
