package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// checkToken does what a relying party does with a token: it verifies it
// against the issuer's discovery document and JWKS (go-oidc, with the
// audience), then asks the issuer whether the token's lease is still
// current. It prints what it found and fails unless both hold.
func checkToken(ctx context.Context, issuer, audience, token string) error {
	provider, err := oidc.NewProvider(ctx, strings.TrimRight(issuer, "/"))
	if err != nil {
		return fmt.Errorf("discovery at %s: %w", issuer, err)
	}
	idt, err := provider.Verifier(&oidc.Config{ClientID: audience}).Verify(ctx, token)
	if err != nil {
		return fmt.Errorf("the token does not verify against %s's JWKS: %w", issuer, err)
	}
	var claims struct {
		Generation  int    `json:"generation"`
		LeaseID     string `json:"lease_id"`
		Environment string `json:"environment"`
	}
	if err := idt.Claims(&claims); err != nil {
		return err
	}
	fmt.Printf("verified against %s's JWKS: sub %s, aud %s, expires %s, generation %d, lease %s\n",
		issuer, idt.Subject, audience, idt.Expiry.UTC().Format("15:04:05"), claims.Generation, claims.LeaseID)
	active, err := introspect(ctx, strings.TrimRight(issuer, "/")+"/v1/leases/introspect", token)
	if err != nil {
		return err
	}
	fmt.Printf("introspection: active %v\n", active)
	if !active {
		return fmt.Errorf("the token's lease is not current")
	}
	return nil
}

func introspect(ctx context.Context, url, token string) (bool, error) {
	body, _ := json.Marshal(map[string]string{"token": token})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("introspect: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("introspect: %s: %s", resp.Status, raw)
	}
	var out struct {
		Active bool `json:"active"`
	}
	return out.Active, json.Unmarshal(raw, &out)
}
