package scm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
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

// LambdaKick returns an OnDelivery hook that invokes the scm function
// asynchronously (InvocationType Event: Lambda queues it and answers at
// once), so a new delivery is processed in seconds rather than at the next
// scheduled pass. A failed kick is only logged: the schedule catches up.
func LambdaKick(ctx context.Context, function string, log *slog.Logger) (func(context.Context), error) {
	if function == "" {
		return nil, nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	client := lambda.NewFromConfig(cfg)
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(function),
			InvocationType: types.InvocationTypeEvent, Payload: []byte(`{"source":"forgeci.webhook"}`)}); err != nil {
			log.Warn("could not kick the scm function; the schedule will pick the delivery up", "err", err)
		}
	}, nil
}
