// Package awsenv builds AWS SDK configuration the way a Lambda function has
// it: region and credentials from the environment variables Lambda sets for
// the function's role. It stands in for config.LoadDefaultConfig, whose
// shared-file, SSO, STS and IMDS providers are never used in Lambda and add
// about 1.5 MB to every bootstrap.
package awsenv

import (
	"errors"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Config returns the configuration for region ("" means $AWS_REGION, then
// us-east-1), with static credentials if accessKey is set (S3-compatible
// servers), else those of the environment.
func Config(region, accessKey, secretKey string) (aws.Config, error) {
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = "us-east-1"
	}
	if accessKey == "" {
		accessKey, secretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if accessKey == "" || secretKey == "" {
			return aws.Config{}, errors.New("no AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them for the function's role)")
		}
		return aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(
			accessKey, secretKey, os.Getenv("AWS_SESSION_TOKEN"))}, nil
	}
	return aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")}, nil
}

// Endpoint is the AWS_ENDPOINT_URL_<SERVICE> override for a service (for
// example "SECRETS_MANAGER"), or nil.
func Endpoint(service string) *string {
	if v := os.Getenv("AWS_ENDPOINT_URL_" + service); v != "" {
		return &v
	}
	return nil
}
