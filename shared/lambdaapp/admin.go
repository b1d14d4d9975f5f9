package lambdaapp

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// AdminRequest is the event of the admin function. It has no HTTP route:
// only a principal allowed lambda:InvokeFunction on it can call it, e.g.
//
//	aws lambda invoke --function-name $ADMIN --cli-binary-format raw-in-base64-out \
//	    --payload '{"command": "registration-token", "ttl_hours": 24}' /dev/stdout
type AdminRequest struct {
	// Command is registration-token, create-user, list-runners or
	// revoke-runner.
	Command     string  `json:"command"`
	TTLHours    float64 `json:"ttl_hours,omitempty"`   // registration-token (default 24)
	Description string  `json:"description,omitempty"` // registration-token
	// registration-token: the runner's scope (projects by name or ID, none
	// meaning all; untrusted: it takes pull requests from forks too).
	Projects      []string `json:"projects,omitempty"`
	Untrusted     bool     `json:"untrusted,omitempty"`
	UntrustedOnly bool     `json:"untrusted_only,omitempty"` // registration-token: no trusted work
	Name          string   `json:"name,omitempty"`           // create-user
	Role          string   `json:"role,omitempty"`           // create-user: admin (global) or user (rights from memberships)
	RunnerID      string   `json:"runner_id,omitempty"`      // revoke-runner
	Cursor        string   `json:"cursor,omitempty"`         // list-runners: the next page
}

// AdminResponse carries what the command made. Tokens are shown here once
// and never logged.
type AdminResponse struct {
	RegistrationToken string             `json:"registration_token,omitempty"`
	ExpiresAt         *time.Time         `json:"expires_at,omitempty"`
	User              *store.User        `json:"user,omitempty"`
	Token             string             `json:"token,omitempty"`
	Runners           []store.RunnerInfo `json:"runners,omitempty"`
	NextCursor        string             `json:"next_cursor,omitempty"` // list-runners: more to come
	Revoked           string             `json:"revoked,omitempty"`
}

// Admin returns the admin function's handler: the operations that have no
// HTTP route (registering runners needs a one-time token an admin makes;
// revoking a runner; making the first user).
func Admin(st *store.Store) func(context.Context, AdminRequest) (AdminResponse, error) {
	return func(ctx context.Context, req AdminRequest) (AdminResponse, error) {
		switch req.Command {
		case "registration-token":
			ttl := time.Duration(req.TTLHours * float64(time.Hour))
			if ttl <= 0 {
				ttl = 24 * time.Hour
			}
			tok, exp, err := st.CreateRegistrationToken(ctx, ttl, req.Description,
				store.Scope{Projects: req.Projects, Untrusted: req.Untrusted, UntrustedOnly: req.UntrustedOnly})
			return AdminResponse{RegistrationToken: tok, ExpiresAt: &exp}, err
		case "create-user":
			if req.Name == "" {
				return AdminResponse{}, domain.Errorf(domain.EInvalid, "create-user needs name")
			}
			if req.Role == "" {
				req.Role = store.RoleUser
			}
			u, tok, err := st.CreateUser(ctx, req.Name, req.Role)
			if err != nil {
				return AdminResponse{}, err
			}
			return AdminResponse{User: &u, Token: tok}, nil
		case "list-runners":
			rs, next, err := st.ListRunners(ctx, store.Page{Limit: store.MaxPageSize, Cursor: req.Cursor})
			return AdminResponse{Runners: rs, NextCursor: next}, err
		case "revoke-runner":
			if req.RunnerID == "" {
				return AdminResponse{}, domain.Errorf(domain.EInvalid, "revoke-runner needs runner_id")
			}
			return AdminResponse{Revoked: req.RunnerID}, st.RevokeRunner(ctx, req.RunnerID)
		}
		return AdminResponse{}, fmt.Errorf("unknown command %q: use registration-token, create-user, list-runners or revoke-runner", req.Command)
	}
}

// StartAdmin serves admin requests. It does not return.
func StartAdmin(st *store.Store) {
	lambda.Start(Admin(st))
}
