package lambdaapp_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/lambdaapp"
	"github.com/forgeci/forgeci/shared/lambdaapp/lambdatest"
)

// TestSecret: <name>_SECRET_ARN reads Secrets Manager (through the SDK, at a
// stand-in endpoint); otherwise <name> itself is the value; neither is an
// error that names both.
func TestSecret(t *testing.T) {
	sm := lambdatest.NewSecretsManager(map[string]string{"arn:x:secret:k": "from-secrets-manager"})
	defer sm.Close()
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm.URL)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()

	t.Setenv("FORGECI_TEST_KEY", "from-env")
	if v, err := lambdaapp.Secret(ctx, "FORGECI_TEST_KEY"); err != nil || v != "from-env" {
		t.Fatalf("env: %q %v", v, err)
	}
	t.Setenv("FORGECI_TEST_KEY_SECRET_ARN", "arn:x:secret:k")
	if v, err := lambdaapp.Secret(ctx, "FORGECI_TEST_KEY"); err != nil || v != "from-secrets-manager" {
		t.Fatalf("secrets manager: %q %v", v, err)
	}
	t.Setenv("FORGECI_TEST_KEY_SECRET_ARN", "arn:x:secret:missing")
	if _, err := lambdaapp.Secret(ctx, "FORGECI_TEST_KEY"); err == nil || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Fatalf("missing secret: %v", err)
	}
	if _, err := lambdaapp.Secret(ctx, "FORGECI_TEST_UNSET"); err == nil || !strings.Contains(err.Error(), "FORGECI_TEST_UNSET_SECRET_ARN") {
		t.Fatalf("unset: %v", err)
	}
}

// TestDatabaseURL: the AWS shape (host, port, name, sslmode and a
// credentials secret) assembles a URL with the password escaped; without a
// host, FORGECI_DATABASE_URL is used as it is.
func TestDatabaseURL(t *testing.T) {
	ctx := context.Background()
	t.Setenv("FORGECI_DATABASE_URL", "postgres://u:p@localhost:5432/db")
	if u, err := lambdaapp.DatabaseURL(ctx); err != nil || u != "postgres://u:p@localhost:5432/db" {
		t.Fatalf("plain URL: %q %v", u, err)
	}
	t.Setenv("FORGECI_DATABASE_HOST", "proxy.example")
	t.Setenv("FORGECI_DATABASE_PORT", "6432")
	t.Setenv("FORGECI_DATABASE_NAME", "forgeci")
	t.Setenv("FORGECI_DATABASE_SSLMODE", "verify-full")
	t.Setenv("FORGECI_DATABASE_CREDENTIALS", `{"username": "forgeci", "password": "p@ss:w/rd?#%", "host": "db.internal"}`)
	raw, err := lambdaapp.DatabaseURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	if u.Host != "proxy.example:6432" || u.User.Username() != "forgeci" || pw != "p@ss:w/rd?#%" || u.Path != "/forgeci" ||
		u.Query().Get("sslmode") != "verify-full" {
		t.Fatalf("assembled %s", raw)
	}
	t.Setenv("FORGECI_DATABASE_CREDENTIALS", `{"username": "forgeci"}`)
	if _, err := lambdaapp.DatabaseURL(ctx); err == nil {
		t.Fatal("credentials without a password were accepted")
	}
}
