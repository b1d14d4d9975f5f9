// Package kick wakes the scm function from the functions that record
// deliveries. It is apart from package scm so that the scm bootstrap does
// not carry it.
package kick

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/forgeci/forgeci/shared/awsenv"
)

// payload is what the scm function receives: not a schedule, so it runs
// a kicked pass.
const payload = `{"source":"forgeci.webhook"}`

// Lambda returns an OnDelivery hook that invokes the scm function
// asynchronously (Lambda's Invoke with InvocationType Event: Lambda
// queues it and answers 202 at once), so a new delivery is processed in
// seconds rather than at the next scheduled pass. A failed kick is
// logged and returned: the schedule catches up if the delivery's note was
// made (the webhook answers 503 if neither was). The call is a signed
// request of its own (awsenv.Client), not the SDK's Lambda client (0.8 MB).
func Lambda(ctx context.Context, function string, log *slog.Logger) (func(context.Context) error, error) {
	if function == "" {
		return nil, nil
	}
	client, err := awsenv.NewClient("lambda", "LAMBDA")
	if err != nil {
		return nil, err
	}
	path := "/2015-03-31/functions/" + url.PathEscape(function) + "/invocations"
	header := http.Header{"X-Amz-Invocation-Type": {"Event"}, "Content-Type": {"application/json"}}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, _, err := client.Do(ctx, http.MethodPost, path, header, []byte(payload))
		if err != nil {
			log.Warn("could not kick the scm function", "err", err)
		}
		return err
	}, nil
}
