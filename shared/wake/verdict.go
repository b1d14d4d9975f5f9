package wake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Verdicts let an idle poll authenticate without PostgreSQL: after a
// runner's token was checked there, the note hints/runners/<h> (h derived
// from the token's stored hash) says which runner it is, until its Until.
// Revoking a runner deletes its note in the revoking transaction and again
// after it commits; a process believes a note it read for VerdictCache at
// most. So a revoked runner's idle polls get "no job" (never a job: a
// claim that takes one re-checks the runner in PostgreSQL) for at most
// VerdictCache after the revocation, or VerdictLife if S3 lost both
// deletions.
const (
	VerdictLife  = 24 * time.Hour
	VerdictCache = time.Minute
	// verdictRenew: a verdict this old is written again at the next
	// poll that reaches the database.
	verdictRenew = VerdictLife / 2
)

type verdict struct {
	RunnerID string `json:"runner_id"`
	Until    int64  `json:"until"` // Unix milliseconds
}

type cachedVerdict struct {
	v       verdict
	readAt  time.Time
	present bool
}

func verdictKey(tokenHash []byte) string {
	h := sha256.Sum256(append([]byte("forgeci verdict\x00"), tokenHash...))
	return verdictPrefix + hex.EncodeToString(h[:])
}

// Verdict returns the runner a token (by its stored hash) was last found
// to be, if that is still believed.
func (b *Board) Verdict(ctx context.Context, tokenHash []byte) (string, bool) {
	key := verdictKey(tokenHash)
	now := b.now()
	b.mu.Lock()
	c, ok := b.verdicts[key]
	b.mu.Unlock()
	if !ok || now.Sub(c.readAt) >= b.verdictCache {
		c = cachedVerdict{readAt: now}
		body, err := b.obj.GetNote(ctx, key, maxNote)
		if err != nil && !isNotFound(err) {
			return "", false // unreadable: ask PostgreSQL, and remember nothing
		}
		c.present = err == nil && json.Unmarshal(body, &c.v) == nil && c.v.RunnerID != ""
		b.mu.Lock()
		if len(b.verdicts) > 10000 {
			b.verdicts = map[string]cachedVerdict{}
		}
		b.verdicts[key] = c
		b.mu.Unlock()
	}
	if !c.present || now.UnixMilli() >= c.v.Until {
		return "", false
	}
	return c.v.RunnerID, true
}

// NeedsVerdict reports whether a poll that authenticated in PostgreSQL
// should (re)write the token's verdict.
func (b *Board) NeedsVerdict(ctx context.Context, tokenHash []byte, runnerID string) bool {
	id, ok := b.Verdict(ctx, tokenHash)
	if !ok || id != runnerID {
		return true
	}
	b.mu.Lock()
	c := b.verdicts[verdictKey(tokenHash)]
	b.mu.Unlock()
	return time.UnixMilli(c.v.Until).Sub(b.now()) < VerdictLife-verdictRenew
}

// PutVerdict notes that the token is runner's. The caller checks the
// runner again in PostgreSQL after this returns and calls DropVerdict if
// it was revoked meanwhile (see the const block).
func (b *Board) PutVerdict(ctx context.Context, tokenHash []byte, runnerID string) error {
	v := verdict{RunnerID: runnerID, Until: b.now().Add(VerdictLife).UnixMilli()}
	body, _ := json.Marshal(v)
	key := verdictKey(tokenHash)
	if err := b.put(ctx, key, body); err != nil {
		return fmt.Errorf("wake: note verdict: %w", err)
	}
	b.mu.Lock()
	b.verdicts[key] = cachedVerdict{v: v, readAt: b.now(), present: true}
	b.mu.Unlock()
	return nil
}

// DropVerdict deletes the token's verdict, and reads it back gone.
func (b *Board) DropVerdict(ctx context.Context, tokenHash []byte) error {
	// Bounded as writes are: a revocation calls it holding its rows.
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	key := verdictKey(tokenHash)
	b.mu.Lock()
	delete(b.verdicts, key)
	b.mu.Unlock()
	if err := b.obj.Delete(ctx, []string{key}); err != nil {
		return fmt.Errorf("wake: drop verdict: %w", err)
	}
	if _, err := b.obj.GetNote(ctx, key, maxNote); !isNotFound(err) {
		return fmt.Errorf("%w: verdict still readable (%v)", ErrLost, err)
	}
	return nil
}
