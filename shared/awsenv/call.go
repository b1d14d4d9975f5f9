package awsenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Client makes signed requests of one AWS service without that service's
// SDK client. Each SDK service client weighs 0.3 to 1 MB in every
// bootstrap that links it, and cold starts grow with the bootstrap; the
// functions make one or two kinds of call per service (read a secret at
// cold start, wake a function), which a Signature V4 request does with
// the SDK's own signer and credentials.
type Client struct {
	cfg      aws.Config
	service  string // the signing name, e.g. "secretsmanager"
	endpoint string
	http     *http.Client
	signer   *v4.Signer
}

// NewClient is a client of service (its signing name and endpoint prefix,
// e.g. "secretsmanager", "lambda"), at AWS_ENDPOINT_URL_<envName> if set,
// else the service's regional endpoint.
func NewClient(service, envName string) (*Client, error) {
	cfg, err := Config("", "", "")
	if err != nil {
		return nil, err
	}
	domain := "amazonaws.com"
	if strings.HasPrefix(cfg.Region, "cn-") {
		domain = "amazonaws.com.cn" // the aws-cn partition
	}
	endpoint := "https://" + service + "." + cfg.Region + "." + domain
	if e := Endpoint(envName); e != nil {
		endpoint = strings.TrimSuffix(*e, "/")
	}
	// Three attempts of 3 s stay inside Lambda's 10 s for a cold start.
	return &Client{cfg: cfg, service: service, endpoint: endpoint, http: &http.Client{Timeout: 3 * time.Second},
		signer: v4.NewSigner()}, nil
}

// Error is an AWS error answer.
type Error struct {
	Status  int
	Type    string // e.g. ResourceNotFoundException
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d): %s", e.Type, e.Status, e.Message)
}

// Do sends one signed request and returns the answer's status and body;
// an answer of 300 or more is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, header http.Header, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	creds, err := c.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return 0, nil, err
	}
	sum := sha256.Sum256(body)
	if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), c.service, c.cfg.Region, time.Now()); err != nil {
		return 0, nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, out, errorOf(resp, out)
	}
	return resp.StatusCode, out, nil
}

// errorOf reads an error answer: its type from X-Amzn-ErrorType or the
// JSON __type (either may carry a namespace or a suffix), its message from
// the JSON message.
func errorOf(resp *http.Response, body []byte) *Error {
	var e struct {
		Type     string `json:"__type"`
		Message  string `json:"message"`
		MessageU string `json:"Message"`
	}
	_ = json.Unmarshal(body, &e)
	t := resp.Header.Get("X-Amzn-ErrorType")
	if t == "" {
		t = e.Type
	}
	t, _, _ = strings.Cut(t, ":")
	if i := strings.LastIndex(t, "#"); i >= 0 {
		t = t[i+1:]
	}
	msg := e.Message + e.MessageU
	if msg == "" {
		msg = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	return &Error{Status: resp.StatusCode, Type: t, Message: msg}
}

// MaxAttempts is how many times JSON tries a call.
const MaxAttempts = 3

// JSON calls an operation of an AWS JSON 1.1 API (target: the
// X-Amz-Target, e.g. "secretsmanager.GetSecretValue"), trying it up to
// MaxAttempts times on throttling, a server error or no answer (the
// operations called this way are safe to repeat).
func (c *Client) JSON(ctx context.Context, target string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	h := http.Header{"Content-Type": {"application/x-amz-json-1.1"}, "X-Amz-Target": {target}}
	for attempt := 0; ; attempt++ {
		var raw []byte
		_, raw, err = c.Do(ctx, http.MethodPost, "/", h, body)
		if err == nil {
			return json.Unmarshal(raw, out)
		}
		if attempt == MaxAttempts-1 || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
	}
}

func retryable(err error) bool {
	e, ok := err.(*Error)
	return !ok || e.Status >= 500 || e.Status == http.StatusTooManyRequests || strings.Contains(e.Type, "Throttl")
}
