package lambdaapp

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// regionName finds a region in an authority's name ("Amazon RDS
// us-east-1 Root CA RSA2048 G1").
var regionName = regexp.MustCompile(`\b[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+\b`)

// rdsCASpans computes rdsCARegions from the bundle: for each region some
// authority names, the byte spans of the authorities naming it or none.
func rdsCASpans(t *testing.T) map[string][][2]int {
	t.Helper()
	type cert struct {
		span   [2]int
		region string
	}
	var certs []cert
	const end = "-----END CERTIFICATE-----\n"
	for at := 0; ; {
		i := bytes.Index(rdsCA[at:], []byte("-----BEGIN CERTIFICATE-----"))
		if i < 0 {
			break
		}
		j := bytes.Index(rdsCA[at+i:], []byte(end))
		if j < 0 {
			t.Fatal("an unterminated certificate in rds-ca.pem")
		}
		span := [2]int{at + i, at + i + j + len(end)}
		block, _ := pem.Decode(rdsCA[span[0]:span[1]])
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, cert{span, regionName.FindString(c.Subject.CommonName)})
		at = span[1]
	}
	spans := map[string][][2]int{}
	for _, c := range certs {
		if c.region != "" {
			spans[c.region] = nil
		}
	}
	for region := range spans {
		for _, c := range certs {
			if c.region == region || c.region == "" {
				spans[region] = append(spans[region], c.span)
			}
		}
	}
	return spans
}

// TestRDSCARegions holds rdsCARegions equal to what the bundle says; after
// updating rds-ca.pem, paste the table this prints when it fails.
func TestRDSCARegions(t *testing.T) {
	want := rdsCASpans(t)
	if !reflect.DeepEqual(want, rdsCARegions) {
		var b strings.Builder
		b.WriteString("var rdsCARegions = map[string][][2]int{\n")
		for _, r := range slices.Sorted(maps.Keys(want)) {
			fmt.Fprintf(&b, "\t%q: {", r)
			for i, s := range want[r] {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "{%d, %d}", s[0], s[1])
			}
			b.WriteString("},\n")
		}
		b.WriteString("}\n")
		t.Fatalf("rdsCARegions is not the bundle's; rdsca_regions.go should read:\n%s", b.String())
	}
}

// TestRDSAuthoritiesOfARegion: a region's authorities are its own three
// roots and the bundle's region-less ones, not another region's; a region
// the bundle does not name gets the whole bundle.
func TestRDSAuthoritiesOfARegion(t *testing.T) {
	names := func(pemBytes []byte) []string {
		var out []string
		for {
			var block *pem.Block
			if block, pemBytes = pem.Decode(pemBytes); block == nil {
				return out
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c.Subject.CommonName)
		}
	}
	got := names(rdsAuthorities("eu-west-1"))
	for _, want := range []string{"Amazon RDS eu-west-1 Root CA RSA2048 G1", "Amazon RDS eu-west-1 Root CA RSA4096 G1",
		"Amazon RDS eu-west-1 Root CA ECC384 G1", "Amazon RDS Root 2019 CA"} {
		if !slices.Contains(got, want) {
			t.Errorf("eu-west-1's authorities %q lack %q", got, want)
		}
	}
	for _, n := range got {
		if r := regionName.FindString(n); r != "" && r != "eu-west-1" {
			t.Errorf("eu-west-1's authorities hold %q", n)
		}
	}
	if all := names(rdsAuthorities("xx-nowhere-9")); len(all) != 115 || len(got) >= len(all) {
		t.Fatalf("an unknown region's authorities: %d, want the bundle's 115 (eu-west-1 has %d)", len(all), len(got))
	}
}
