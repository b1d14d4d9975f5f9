package idtoken

import (
	"context"
	"encoding/base64"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Per-call bounds FuzzVerify holds Verify to: hostile input must cost no
// more than a real token does, give or take.
const (
	fuzzMaxTime  = 100 * time.Millisecond
	fuzzMaxBytes = 1 << 20
)

// FuzzVerify feeds arbitrary strings to Verify. Besides not panicking, a
// call must return within fuzzMaxTime and allocate under fuzzMaxBytes,
// and anything it accepts must carry the signed claims (a different
// spelling of the same token, at most).
func FuzzVerify(f *testing.F) {
	iss, err := NewKeyFile(issuerURL, f.TempDir()+"/oidc.pem")
	if err != nil {
		f.Fatal(err)
	}
	c := testClaims(time.Now())
	tok, err := iss.Sign(context.Background(), c)
	if err != nil {
		f.Fatal(err)
	}
	now := c.IssuedAt
	parts := strings.Split(tok, ".")
	f.Add(tok)
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(parts[1] + "." + parts[0] + "." + parts[2])
	f.Add(tok[:len(tok)-1])
	f.Add(tok + "A")
	f.Add(strings.Replace(tok, "a", "b", 1))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","crit":["b64"],"b64":false}`)) + "." + parts[1] + "." + parts[2])
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","jwk":{"kty":"RSA","n":"AQAB","e":"AQAB"}}`)) + "." + parts[1] + "." + parts[2])
	f.Add(`{"payload":"` + parts[1] + `","signatures":[]}`)
	f.Add(strings.Repeat(".", 100))
	f.Add(strings.Repeat("A", MaxTokenLen))
	f.Add("")
	// Fetch the key once, so the oracle measures Verify, not the first load.
	if _, err := iss.Verify(context.Background(), tok, now); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		got, err := iss.Verify(context.Background(), token, now)
		elapsed := time.Since(start)
		runtime.ReadMemStats(&after)
		if elapsed > fuzzMaxTime {
			t.Errorf("Verify of %d bytes took %s", len(token), elapsed)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > fuzzMaxBytes {
			t.Errorf("Verify of %d bytes allocated %d bytes", len(token), n)
		}
		if err == nil && (got.ID != c.ID || got.Subject != c.Subject || got.Issuer != issuerURL) {
			t.Errorf("Verify accepted claims never signed: %+v", got)
		}
	})
}
