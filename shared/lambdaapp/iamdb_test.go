package lambdaapp

import (
	"bytes"
	"context"
	"crypto/x509"
	neturl "net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestIAMDatabaseConnections(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("FORGECI_DATABASE_HOST", "db.cluster-x.eu-west-1.rds.amazonaws.com")
	t.Setenv("FORGECI_DATABASE_IAM_USER", "forgeci_app")
	t.Setenv("FORGECI_DATABASE_CREDENTIALS_SECRET_ARN", "")
	t.Setenv("FORGECI_DATABASE_SSLROOTCERT", "rds")
	t.Setenv("TMPDIR", t.TempDir())
	url, err := DatabaseURL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(url, ":@") || !strings.Contains(url, "forgeci_app@") || !strings.Contains(url, "sslmode=verify-full") ||
		!strings.Contains(url, "sslrootcert=") {
		t.Fatalf("url %s", url)
	}
	// The file holds the region's authorities, not the whole bundle.
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(u.Query().Get("sslrootcert"))
	if err != nil || !bytes.Equal(written, rdsAuthorities("eu-west-1")) || bytes.Equal(written, rdsCA) {
		t.Fatalf("sslrootcert holds %d bytes (%v), want eu-west-1's %d of the bundle's %d", len(written), err,
			len(rdsAuthorities("eu-west-1")), len(rdsCA))
	}
	opts, err := poolOptions()
	if err != nil || opts.Configure == nil {
		t.Fatalf("pool options: %v %v", opts, err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := opts.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	// pgx read the RDS authorities from sslrootcert.
	if cfg.ConnConfig.TLSConfig == nil || cfg.ConnConfig.TLSConfig.RootCAs == nil || len(cfg.ConnConfig.Fallbacks) != 0 ||
		cfg.ConnConfig.TLSConfig.ServerName != "db.cluster-x.eu-west-1.rds.amazonaws.com" {
		t.Fatalf("TLS: %+v, fallbacks %d", cfg.ConnConfig.TLSConfig, len(cfg.ConnConfig.Fallbacks))
	}
	region := x509.NewCertPool()
	region.AppendCertsFromPEM(rdsAuthorities("eu-west-1"))
	if !cfg.ConnConfig.TLSConfig.RootCAs.Equal(region) {
		t.Fatal("the connections trust other authorities than the region's")
	}
	cc := cfg.ConnConfig.Copy()
	if err := cfg.BeforeConnect(context.Background(), cc); err != nil {
		t.Fatal(err)
	}
	// An RDS token is a presigned connect request for this endpoint and user.
	for _, want := range []string{"db.cluster-x.eu-west-1.rds.amazonaws.com:5432?Action=connect", "DBUser=forgeci_app",
		"X-Amz-Credential=AKIDEXAMPLE%2F", "%2Feu-west-1%2Frds-db%2Faws4_request", "X-Amz-Signature="} {
		if !strings.Contains(cc.Password, want) {
			t.Fatalf("token %q lacks %q", cc.Password, want)
		}
	}

	// The migrate function has the master password: no token there.
	t.Setenv("FORGECI_DATABASE_CREDENTIALS_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:db")
	if iamUser() != "" {
		t.Fatal("a function with the master password signs tokens")
	}
}
