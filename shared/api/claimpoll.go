package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// Polls shape idle polls (docs/runner-protocol.md "Idle polls").
type Polls struct {
	// Hold is the longest an idle poll is held open (up to its
	// wait_seconds) before "no job": 0 in AWS, where a held Lambda is
	// billed by the millisecond and the runner waits instead.
	Hold time.Duration
	// Busy and Idle are the HeaderPollAfter answers: Busy while a job was
	// queued in the last QuietAfter, Idle after.
	Busy, Idle time.Duration
}

// QuietAfter is how long after the last queued job polls slow down.
const QuietAfter = 5 * time.Minute

func (p Polls) withDefaults() Polls {
	if p.Busy <= 0 {
		p.Busy = 2 * time.Second
	}
	if p.Idle <= 0 {
		p.Idle = 20 * time.Second
	}
	return p
}

// claimRoute authenticates and claims; an idle poll (queue_hint present,
// with wake-up hints configured) may be answered without PostgreSQL.
func (s *Server) claimRoute(w http.ResponseWriter, r *http.Request) error {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return domain.Errorf(domain.EUnauthorized, "Authorization: Bearer <runner token> is required")
	}
	token = strings.TrimSpace(token)
	var req protocol.ClaimRequest
	if err := decodeJSON(w, r, maxBody, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	if req.QueueHint == nil || s.Store.Board() == nil {
		runner, err := s.Store.AuthenticateRunner(r.Context(), token)
		if err != nil {
			return err
		}
		return s.claim(w, r, runner, req)
	}
	return s.idlePoll(w, r, token, req)
}

// idlePoll answers a claim from the queue hint while nothing was queued
// since the runner's last scan and its token's verdict is believed; else
// it authenticates in PostgreSQL and scans the whole queue once. It is
// held (Polls.Hold) until a job is found, the wait ends, or this process
// queues jobs; each look reads the hint again.
func (s *Server) idlePoll(w http.ResponseWriter, r *http.Request, token string, req protocol.ClaimRequest) error {
	ctx := r.Context()
	b := s.Store.Board()
	polls := s.Polls.withDefaults()
	deadline := time.Now().Add(min(time.Duration(req.WaitSeconds)*time.Second, polls.Hold))
	hash := store.TokenHash(token)
	hint := *req.QueueHint
	var runner *store.Runner
	var qs wake.QueueState
	for {
		qs = b.Queue(ctx, hint)
		believed := runner != nil
		if !believed && qs.Idle {
			_, believed = b.Verdict(ctx, hash)
		}
		if !qs.Idle || !believed {
			if runner == nil {
				rr, err := s.Store.AuthenticateRunner(ctx, token)
				if err != nil {
					return err
				}
				rr.Features, rr.Version, rr.Slots = req.Features, req.Version, req.Slots
				runner = &rr
			}
			c, settled, err := s.scan(ctx, b, qs, *runner, req.Labels, hash, token)
			if err != nil || c != nil {
				if c != nil {
					writeJSON(w, http.StatusOK, c)
				}
				return err
			}
			hint = ""
			if settled {
				hint = qs.Token
			}
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(min(left, time.Second))
		select {
		case <-ctx.Done():
		case <-s.Store.Queued():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil // the runner went away: nothing to answer
		}
	}
	if hint != "" {
		w.Header().Set(protocol.HeaderQueueHint, hint)
	}
	after := polls.Busy
	if polls.Hold > 0 {
		after = 0
	} else if qs.Quiet >= QuietAfter {
		after = polls.Idle
	}
	w.Header().Set(protocol.HeaderPollAfter, strconv.Itoa(int(after.Seconds())))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// scan is an idle poll's look in PostgreSQL: a hint that is missing is
// made first (so that later polls can be idle), then one whole-queue
// claim; when it finds nothing, the token's verdict is written if due.
func (s *Server) scan(ctx context.Context, b *wake.Board, qs wake.QueueState, runner store.Runner, labels []string,
	hash []byte, token string) (*store.Claim, bool, error) {
	if qs.Missing {
		if err := b.MarkQueued(ctx, b.Now()); err != nil {
			s.Log.Warn("queue hint", "err", err) // runners keep scanning until it is written
		}
	}
	c, settled, err := s.Store.ClaimScan(ctx, runner, labels)
	if err != nil || c != nil || !b.NeedsVerdict(ctx, hash, runner.ID) {
		return c, settled, err
	}
	if err := b.PutVerdict(ctx, hash, runner.ID); err != nil {
		// Its polls keep asking PostgreSQL; but a write that failed
		// here (its read-back, its time) may have landed all the same.
		s.Log.Warn("runner verdict", "runner", runner.ID, "err", err)
	}
	// A revocation that committed before the verdict was written has
	// deleted nothing of it: look again, and take it back.
	if _, err := s.Store.AuthenticateRunner(ctx, token); err != nil {
		if derr := b.DropVerdict(ctx, hash); derr != nil {
			s.Log.Error("revoked runner's verdict stays", "runner", runner.ID, "err", derr)
		}
		return nil, false, err
	}
	return nil, settled, nil
}
