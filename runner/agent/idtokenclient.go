package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/forgeci/forgeci/shared/protocol"
)

// IDTokenSocketEnv names the job's identity-token socket in its steps'
// environment; RunnerBinEnv names the runner executable they may run
// (forgeci-runner id-token asks the socket); ServerURLEnv is the server
// the runner talks to.
const (
	IDTokenSocketEnv = "FORGECI_ID_TOKEN_SOCKET"
	RunnerBinEnv     = "FORGECI_RUNNER_BIN"
	ServerURLEnv     = "FORGECI_SERVER_URL"
)

// FetchIDToken asks the job's identity-token socket for a token for
// audience (what forgeci-runner id-token does inside a step). An error
// answer comes back as its message.
func FetchIDToken(ctx context.Context, socket, audience string) (protocol.IDTokenResponse, error) {
	var out protocol.IDTokenResponse
	if socket == "" {
		return out, errors.New("no identity-token socket: $" + IDTokenSocketEnv +
			" is not set (the job's pipeline needs permissions: {id-token: write})")
	}
	// One request a connection: an idle one would hold one of the few
	// the socket serves at once.
	hc := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/token?audience="+url.QueryEscape(audience), nil)
	if err != nil {
		return out, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return out, fmt.Errorf("identity-token socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, protocol.DecodeError(resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Token == "" {
		return out, fmt.Errorf("identity-token socket %s: unexpected answer: %.200s", socket, raw)
	}
	return out, nil
}
