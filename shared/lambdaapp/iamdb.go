package lambdaapp

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/awsenv"
	"github.com/forgeci/forgeci/shared/store"
)

// The default shape's functions run outside any VPC (no NAT gateway, no
// paid endpoints) and reach the database over the internet: with IAM
// authentication, so that no password is ever in a function (a token is
// signed locally, lives 15 minutes and opens one database user's
// connections), and over TLS verified against the RDS certificate
// authorities of the stack's region (rdsAuthorities).

// iamUser is the database user the functions connect as with IAM tokens
// (FORGECI_DATABASE_IAM_USER), when they are not given a password.
func iamUser() string {
	if os.Getenv("FORGECI_DATABASE_CREDENTIALS_SECRET_ARN") != "" {
		return ""
	}
	return os.Getenv("FORGECI_DATABASE_IAM_USER")
}

// iamDatabaseURL is the URL of an IAM-authenticated connection: the user,
// no password (each connection gets a fresh token, iamConfigure), TLS
// verified against the RDS authorities.
func iamDatabaseURL(host, user string) (string, error) {
	q := url.Values{"sslmode": {"verify-full"}}
	if err := rdsRootCert(q); err != nil {
		return "", err
	}
	u := url.URL{Scheme: "postgres", User: url.User(user),
		Host: net.JoinHostPort(host, databasePort()), Path: "/" + envOr("FORGECI_DATABASE_NAME", "forgeci"),
		RawQuery: q.Encode()}
	return u.String(), nil
}

// rdsRootCert adds sslrootcert (the RDS authorities, written to a file
// once) to a URL's query when FORGECI_DATABASE_SSLROOTCERT is "rds": the
// database itself presents a certificate of RDS's own authorities, which
// no system trusts (RDS Proxy presents a public one).
func rdsRootCert(q url.Values) error {
	if os.Getenv("FORGECI_DATABASE_SSLROOTCERT") != "rds" {
		return nil
	}
	path := filepath.Join(os.TempDir(), "forgeci-rds-ca.pem")
	if err := os.WriteFile(path, rdsAuthorities(os.Getenv("AWS_REGION")), 0o644); err != nil {
		return fmt.Errorf("write the RDS authorities: %w", err)
	}
	q.Set("sslrootcert", path)
	return nil
}

// iamConfigure makes cfg's connections sign an IAM token as their
// password and verify the server against the RDS authorities.
func iamConfigure(creds aws.CredentialsProvider, region string) (func(*pgxpool.Config) error, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rdsAuthorities(region)) {
		return nil, errors.New("the RDS certificate authorities do not parse")
	}
	return func(cfg *pgxpool.Config) error {
		cc := cfg.ConnConfig
		if cc.TLSConfig == nil {
			return errors.New("an IAM-authenticated connection must use TLS (sslmode=verify-full)")
		}
		cc.TLSConfig.RootCAs = roots
		cc.Fallbacks = nil // never without TLS
		endpoint := net.JoinHostPort(cc.Host, fmt.Sprint(cc.Port))
		user := cc.User
		cfg.BeforeConnect = func(ctx context.Context, c *pgx.ConnConfig) error {
			token, err := auth.BuildAuthToken(ctx, endpoint, region, user, creds)
			if err != nil {
				return fmt.Errorf("sign a database token: %w", err)
			}
			c.Password = token
			return nil
		}
		return nil
	}, nil
}

// poolOptions are PoolOptions, with IAM authentication when the function
// connects without a password.
func poolOptions() (store.PoolOptions, error) {
	opts := PoolOptions
	if iamUser() == "" || os.Getenv("FORGECI_DATABASE_HOST") == "" {
		return opts, nil
	}
	cfg, err := awsenv.Config("", "", "")
	if err != nil {
		return opts, err
	}
	configure, err := iamConfigure(cfg.Credentials, cfg.Region)
	opts.Configure = configure
	return opts, err
}
