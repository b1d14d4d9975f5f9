package idtoken

import (
	"context"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
)

const issuerURL = "https://ci.example.com"

// b64 is base64url without padding, as JWS uses.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// hs256 forges a token with alg HS256, keyed by secret.
func hs256(t *testing.T, kid string, payload, secret []byte) string {
	h, _ := json.Marshal(map[string]string{"alg": "HS256", "typ": "JWT", "kid": kid})
	input := b64(h) + "." + b64(payload)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(input))
	return input + "." + b64(mac.Sum(nil))
}

// TestVerifyRejects feeds Verify forged, altered and malformed tokens.
func TestVerifyRejects(t *testing.T) {
	fake := newFake(t)
	k1, k2 := fake.AddSigningKey(), fake.AddSigningKey()
	iss := kmsIssuer(t, issuerURL, k1)
	c := testClaims(time.Now())
	tok := sign(t, iss, c)
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	kid, _ := header(t, tok)["kid"].(string)

	tampered := strings.Replace(string(payload), `"trusted":true`, `"trusted":false`, 1)
	if tampered == string(payload) {
		t.Fatal("payload has no trusted claim to tamper with")
	}
	none, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": kid})
	pub := iss.keys[k1].pub
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	jwksJSON, _ := iss.JWKS(context.Background())
	otherKid, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "not-a-key"})

	wrongIssuer := sign(t, kmsIssuer(t, "https://evil.example.com", k1), c)
	otherKey := sign(t, kmsIssuer(t, issuerURL, k2), c)
	tests := map[string]string{
		"tampered payload":      parts[0] + "." + b64([]byte(tampered)) + "." + parts[2],
		"alg none":              b64(none) + "." + parts[1] + ".",
		"alg none, signature":   b64(none) + "." + parts[1] + "." + parts[2],
		"HS256, PEM public key": hs256(t, kid, payload, pemKey),
		"HS256, DER public key": hs256(t, kid, payload, der),
		"HS256, JWKS":           hs256(t, kid, payload, jwksJSON),
		"HS256, modulus":        hs256(t, kid, payload, pub.N.Bytes()),
		"wrong issuer":          wrongIssuer,
		"unknown kid":           otherKey,
		"kid swapped":           b64(otherKid) + "." + parts[1] + "." + parts[2],
		"signature of another":  parts[0] + "." + parts[1] + "." + strings.Split(otherKey, ".")[2],
		"no signature":          parts[0] + "." + parts[1] + ".",
		"oversize":              tok + strings.Repeat("A", MaxTokenLen),
		"oversize whitespace":   tok + strings.Repeat(" ", MaxTokenLen),
		"empty":                 "",
		"dots":                  "..",
		"four parts":            tok + ".x",
		"two parts":             parts[0] + "." + parts[1],
		"JSON serialization":    `{"payload":"` + parts[1] + `","protected":"` + parts[0] + `","signature":"` + parts[2] + `"}`,
		"garbage":               "\x00\xff\xfe not a token",
		"padded base64":         parts[0] + "==." + parts[1] + "." + parts[2],
		"bad base64":            parts[0] + ".!!!." + parts[2],
	}
	for name, bad := range tests {
		got, err := iss.Verify(context.Background(), bad, time.Now())
		if err == nil {
			t.Errorf("%s: verified, claims %+v", name, got)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := iss.Verify(context.Background(), tok, time.Now()); err != nil {
		t.Fatalf("the real token: %v", err)
	}
}

// TestVerifyWindow: valid from nbf, inclusive, to exp, exclusive, with
// no leeway, by the clock the caller passes.
func TestVerifyWindow(t *testing.T) {
	iss, _ := fileIssuer(t, issuerURL)
	c := testClaims(time.Now().Add(-time.Hour)) // by the wall clock, long expired
	tok := sign(t, iss, c)
	for _, tt := range []struct {
		name string
		now  time.Time
		ok   bool
	}{
		{"before nbf", c.NotBefore.Add(-time.Nanosecond), false},
		{"at nbf", c.NotBefore, true},
		{"just before exp", c.Expiry.Add(-time.Nanosecond), true},
		{"at exp", c.Expiry, false},
		{"after exp", c.Expiry.Add(time.Second), false},
		{"now", time.Now(), false},
	} {
		_, err := iss.Verify(context.Background(), tok, tt.now)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestVerifyClaimsShape signs payloads Sign never would with the real key
// (read from the key file), so only the claim checks can refuse them.
func TestVerifyClaimsShape(t *testing.T) {
	iss, path := fileIssuer(t, issuerURL)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kid := jwks(t, iss)[0]["kid"]
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: priv.(*rsa.PrivateKey), KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	times := `"iat":` + itoa(now) + `,"nbf":` + itoa(now-5) + `,"exp":` + itoa(now+60)
	tests := map[string]struct {
		payload string
		ok      bool
	}{
		"complete":        {`{"iss":"` + issuerURL + `","sub":"s","aud":"a","jti":"j",` + times + `}`, true},
		"no exp":          {`{"iss":"` + issuerURL + `","iat":` + itoa(now) + `,"nbf":` + itoa(now-5) + `}`, false},
		"no nbf":          {`{"iss":"` + issuerURL + `","iat":` + itoa(now) + `,"exp":` + itoa(now+60) + `}`, false},
		"no iss":          {`{` + times + `}`, false},
		"exp a string":    {`{"iss":"` + issuerURL + `",` + strings.Replace(times, `"exp":`, `"exp":"`, 1) + `"}`, false},
		"exp fractional":  {`{"iss":"` + issuerURL + `","iat":1,"nbf":1,"exp":1e300}`, false},
		"aud a list":      {`{"iss":"` + issuerURL + `","aud":["a"],` + times + `}`, false},
		"not an object":   {`[1,2,3]`, false},
		"not JSON":        {`{"iss":`, false},
		"trailing slash":  {`{"iss":"` + issuerURL + `/",` + times + `}`, false},
		"generation text": {`{"iss":"` + issuerURL + `","generation":"1",` + times + `}`, false},
	}
	for name, tt := range tests {
		obj, err := signer.Sign([]byte(tt.payload))
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := obj.CompactSerialize()
		if _, err := iss.Verify(context.Background(), tok, time.Now()); (err == nil) != tt.ok {
			t.Errorf("%s: err %v, want ok %v", name, err, tt.ok)
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestLostSignResponse: a Sign whose response is lost is retried by the
// SDK; when every attempt is lost Sign fails cleanly, then recovers.
func TestLostSignResponse(t *testing.T) {
	fake := newFake(t)
	iss := kmsIssuer(t, issuerURL, fake.AddSigningKey())
	c := testClaims(time.Now())
	fake.DropResponses(fakekms.OpSign, 1)
	tok := sign(t, iss, c)
	if n := fake.Calls(fakekms.OpSign); n != 2 {
		t.Fatalf("%d Sign calls, want 2 (the lost one and the retry)", n)
	}
	if _, err := iss.Verify(context.Background(), tok, time.Now()); err != nil {
		t.Fatalf("token signed on retry: %v", err)
	}
	fake.DropResponses(fakekms.OpSign, kmsMaxAttempts)
	if tok, err := iss.Sign(context.Background(), c); err == nil {
		t.Fatalf("every response lost, and Sign returned %s", tok)
	}
	if _, err := iss.Verify(context.Background(), sign(t, iss, c), time.Now()); err != nil {
		t.Fatalf("after the drops: %v", err)
	}
}

// TestPublicKeyFailureNotCached: a failed GetPublicKey is retried once
// its failure is older than retryAfter (here none), and a fetched key is
// not fetched again.
func TestPublicKeyFailureNotCached(t *testing.T) {
	fake := newFake(t)
	iss := kmsIssuer(t, issuerURL, fake.AddSigningKey())
	iss.retryAfter = 0
	fake.SetDown(true)
	if _, err := iss.JWKS(context.Background()); err == nil {
		t.Fatal("KMS down, and JWKS succeeded")
	}
	if _, err := iss.Sign(context.Background(), testClaims(time.Now())); err == nil {
		t.Fatal("KMS down, and Sign succeeded")
	}
	fake.SetDown(false)
	fake.DropResponses(fakekms.OpGetPublicKey, kmsMaxAttempts)
	if _, err := iss.JWKS(context.Background()); err == nil {
		t.Fatal("every response lost, and JWKS succeeded")
	}
	if got := jwks(t, iss); len(got) != 1 {
		t.Fatalf("JWKS after recovery: %v", got)
	}
	before := fake.Calls(fakekms.OpGetPublicKey)
	jwks(t, iss)
	sign(t, iss, testClaims(time.Now()))
	if n := fake.Calls(fakekms.OpGetPublicKey); n != before {
		t.Fatalf("%d more GetPublicKey calls once the key was fetched", n-before)
	}
}

// TestRetiredKeyUnavailable: a retired key that KMS no longer serves
// (disabled before it was dropped from the list) is left out of the JWKS,
// the signing key's tokens still verify, and the failing key costs one
// KMS call per retryAfter, not one per request.
func TestRetiredKeyUnavailable(t *testing.T) {
	fake := newFake(t)
	current, retired := fake.AddSigningKey(), fake.AddSigningKey()
	fake.Deny(retired, true)
	iss := kmsIssuer(t, issuerURL, current, retired)
	tok := sign(t, iss, testClaims(time.Now()))
	for range 5 {
		if got := jwks(t, iss); len(got) != 1 {
			t.Fatalf("JWKS: %v", got)
		}
		if _, err := iss.Verify(context.Background(), tok, time.Now()); err != nil {
			t.Fatalf("the signing key's token: %v", err)
		}
	}
	if n := fake.Calls(fakekms.OpGetPublicKey); n > 2*kmsMaxAttempts {
		t.Fatalf("%d GetPublicKey calls: the failing key was asked again on every request", n)
	}
	fake.Deny(current, true)
	only := kmsIssuer(t, issuerURL, retired)
	if _, err := only.JWKS(context.Background()); err == nil {
		t.Fatal("no key can be fetched, and JWKS succeeded")
	}
}

// TestConcurrent signs, verifies and publishes from many goroutines on a
// fresh issuer (run with -race).
func TestConcurrent(t *testing.T) {
	fake := newFake(t)
	iss := kmsIssuer(t, issuerURL, fake.AddSigningKey(), fake.AddSigningKey())
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		wg.Go(func() {
			tok, err := iss.Sign(context.Background(), testClaims(time.Now()))
			if err == nil {
				_, err = iss.Verify(context.Background(), tok, time.Now())
			}
			errs <- err
		})
		wg.Go(func() {
			_, err := iss.JWKS(context.Background())
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestKMSKeyKind: a symmetric or unknown KMS key is refused with an error
// naming it, not a panic or a token nobody can verify, and is never in
// the JWKS.
func TestKMSKeyKind(t *testing.T) {
	fake, symmetric := fakekms.New(t)
	fake.SetEnv(t)
	for _, keyID := range []string{symmetric, "alias/missing"} {
		iss := kmsIssuer(t, issuerURL, keyID)
		_, err := iss.Sign(context.Background(), testClaims(time.Now()))
		if err == nil || !strings.Contains(err.Error(), keyID) {
			t.Errorf("key %s: Sign error %v", keyID, err)
		}
	}
	// A listed key that cannot serve is left out of the JWKS (as a
	// retired key disabled too early), never published as something else.
	good := fake.AddSigningKey()
	if got := jwks(t, kmsIssuer(t, issuerURL, good, symmetric)); len(got) != 1 {
		t.Errorf("JWKS with a symmetric key listed: %v", got)
	}
}

// TestKeyFile: the key is made owner-only, kept across restarts, and its
// tokens verify with go-oidc.
func TestKeyFile(t *testing.T) {
	p := newProvider(t)
	path := filepath.Join(t.TempDir(), "oidc.pem")
	first, err := NewKeyFile(p.URL(), path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v, want 0600", err, info.Mode())
	}
	second, err := NewKeyFile(p.URL(), path)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := jwks(t, first), jwks(t, second); a[0]["kid"] != b[0]["kid"] || a[0]["n"] != b[0]["n"] {
		t.Fatal("a second NewKeyFile made a new key")
	}
	p.serve(second)
	c := testClaims(time.Now())
	tok := sign(t, first, c)
	if _, err := oidcVerify(t, p.URL(), c.Audience, tok); err != nil {
		t.Fatalf("go-oidc: %v", err)
	}
	if _, err := second.Verify(context.Background(), tok, time.Now()); err != nil {
		t.Fatalf("Verify by the restarted issuer: %v", err)
	}

	if _, err := NewKeyFile(issuerURL, filepath.Join(t.TempDir(), "missing", "k.pem")); err == nil {
		t.Error("key file made in a directory that does not exist")
	}
	junk := filepath.Join(t.TempDir(), "junk.pem")
	os.WriteFile(junk, []byte("not a key"), 0o600)
	if _, err := NewKeyFile(issuerURL, junk); err == nil {
		t.Error("junk accepted as a key")
	}
}
