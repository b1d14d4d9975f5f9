package lambdaapp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"

	"github.com/forgeci/forgeci/shared/awsenv"
	"github.com/forgeci/forgeci/shared/store"
)

// Secret returns the secret called name. In AWS the template sets
// <name>_SECRET_ARN and the value is read from Secrets Manager (call it at
// cold start, not per request); elsewhere (the local stack, tests) the value
// is the environment variable <name> itself. Setting neither is an error.
func Secret(ctx context.Context, name string) (string, error) {
	if arn := os.Getenv(name + "_SECRET_ARN"); arn != "" {
		client, err := secretsClient()
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", name, err)
		}
		var out struct{ SecretString *string }
		if err := client.JSON(ctx, "secretsmanager.GetSecretValue", map[string]string{"SecretId": arn}, &out); err != nil {
			return "", fmt.Errorf("secret %s: read %s: %w", name, arn, err)
		}
		if out.SecretString == nil {
			return "", fmt.Errorf("secret %s: %s has no string value", name, arn)
		}
		return *out.SecretString, nil
	}
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s is not set (nor %s_SECRET_ARN)", name, name)
}

// secretsClient is made once per container: Secrets Manager's
// GetSecretValue as a signed request (awsenv.Client), not the SDK's client.
// AWS_ENDPOINT_URL_SECRETS_MANAGER points it elsewhere, which the smoke
// tests use.
var secretsClient = sync.OnceValues(func() (*awsenv.Client, error) {
	return awsenv.NewClient("secretsmanager", "SECRETS_MANAGER")
})

// DatabaseURL returns the PostgreSQL URL the functions connect with.
//
// In AWS the template sets FORGECI_DATABASE_HOST (RDS Proxy's endpoint, or
// the database's), FORGECI_DATABASE_PORT, FORGECI_DATABASE_NAME,
// FORGECI_DATABASE_SSLMODE and FORGECI_DATABASE_CREDENTIALS_SECRET_ARN, the
// Secrets Manager secret holding {"username": ..., "password": ...} (the
// shape RDS and RDS Proxy use; other keys such as the database's own host
// are ignored, since the functions must go through the proxy). The URL is
// assembled from them, so no password is ever in the function's
// configuration. With FORGECI_DATABASE_IAM_USER and no credentials secret
// (the default shape), the URL names that user with no password, and each
// connection signs an IAM token (iamdb.go). Without FORGECI_DATABASE_HOST, FORGECI_DATABASE_URL is the
// whole URL (itself a secret: FORGECI_DATABASE_URL_SECRET_ARN works too).
func DatabaseURL(ctx context.Context) (string, error) {
	host := os.Getenv("FORGECI_DATABASE_HOST")
	if host == "" {
		return Secret(ctx, "FORGECI_DATABASE_URL")
	}
	if user := iamUser(); user != "" {
		return iamDatabaseURL(host, user)
	}
	raw, err := Secret(ctx, "FORGECI_DATABASE_CREDENTIALS")
	if err != nil {
		return "", err
	}
	var creds struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.Unmarshal([]byte(raw), &creds); err != nil || creds.Username == "" || creds.Password == "" {
		return "", fmt.Errorf("FORGECI_DATABASE_CREDENTIALS must be JSON with username and password")
	}
	port := databasePort()
	name := envOr("FORGECI_DATABASE_NAME", "forgeci")
	q := url.Values{"sslmode": {envOr("FORGECI_DATABASE_SSLMODE", "verify-full")}}
	if err := rdsRootCert(q); err != nil {
		return "", err
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(creds.Username, creds.Password),
		Host: net.JoinHostPort(host, port), Path: "/" + name, RawQuery: q.Encode()}
	return u.String(), nil
}

// PreDialDatabase opens the TCP connection to the database in the
// background (store.PreDial), for a function that connects at cold start,
// while DatabaseURL reads the credentials; nil without
// FORGECI_DATABASE_HOST (the whole URL is a secret: nothing to dial
// before it is read).
func PreDialDatabase() *store.PreDialed {
	host := os.Getenv("FORGECI_DATABASE_HOST")
	if host == "" {
		return nil
	}
	return store.PreDial(host, databasePort())
}

// databasePort is FORGECI_DATABASE_PORT, PostgreSQL's own by default.
func databasePort() string { return envOr("FORGECI_DATABASE_PORT", "5432") }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
