// Command hello is the baseline bootstrap for the Lambda measurements: the
// smallest function that answers an API Gateway HTTP API event, built with
// the same flags as ForgeCI's functions.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{"hello":"world"}`,
			Headers: map[string]string{"Content-Type": "application/json"}}, nil
	})
}
