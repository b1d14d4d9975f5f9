package scm

import (
	"fmt"
	"os"
	"strconv"
)

// AppFromEnv builds the App from FORGECI_GITHUB_APP_ID and
// FORGECI_GITHUB_API_URL (optional) and the private key PEM, which the
// caller reads from wherever secrets live.
func AppFromEnv(privateKeyPEM string) (*App, error) {
	id, err := strconv.ParseInt(os.Getenv("FORGECI_GITHUB_APP_ID"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("FORGECI_GITHUB_APP_ID must be the GitHub App's numeric ID")
	}
	if privateKeyPEM == "" {
		return nil, fmt.Errorf("the GitHub App private key is not set")
	}
	return NewApp(id, []byte(privateKeyPEM), os.Getenv("FORGECI_GITHUB_API_URL"))
}
