// Package kick wakes the scm function from the webhook function. It is
// apart from package scm so that the scm bootstrap does not carry the
// Lambda API client.
package kick

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/forgeci/forgeci/shared/awsenv"
)

// Lambda returns an OnDelivery hook that invokes the scm function
// asynchronously (InvocationType Event: Lambda queues it and answers at
// once), so a new delivery is processed in seconds rather than at the next
// scheduled pass. A failed kick is only logged: the schedule catches up.
func Lambda(ctx context.Context, function string, log *slog.Logger) (func(context.Context), error) {
	if function == "" {
		return nil, nil
	}
	cfg, err := awsenv.Config("", "", "")
	if err != nil {
		return nil, err
	}
	client := lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.BaseEndpoint = awsenv.Endpoint("LAMBDA") })
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(function),
			InvocationType: types.InvocationTypeEvent, Payload: []byte(`{"source":"forgeci.webhook"}`)}); err != nil {
			log.Warn("could not kick the scm function; the schedule will pick the delivery up", "err", err)
		}
	}, nil
}
