package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// A run that waits for approval and is never decided on (a fork's pull
// request nobody looks at) is rejected by the collector after
// GCOptions.ApprovalTTL (30 days, as GitHub deletes such runs), by
// approvalExpiredBy; then it ages like any finished run.

// approvalExpiredBy is who a run's rejection names when nobody decided.
const approvalExpiredBy = "ForgeCI: no decision within the approval time"

// expireApprovalsSQL locks up to $1 runs that have waited for approval
// more than $2 seconds, oldest first.
const expireApprovalsSQL = `
SELECT id FROM runs WHERE approval = 'pending' AND finished_at IS NULL
  AND created_at < now() - make_interval(secs => $2)
ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED`

func (s *Store) expireApprovals(ctx context.Context, n int, ttl time.Duration) (int, error) {
	var rejected []string
	k, err := collectBatch(ctx, s, expireApprovalsSQL, []any{n, ttl.Seconds()}, pgx.RowTo[string], func(tx pgx.Tx, ids []string) (int, error) {
		for _, id := range ids {
			if err := applyDecision(ctx, tx, id, "", "", ApprovalRejected, approvalExpiredBy); err != nil {
				return 0, err
			}
		}
		rejected = ids
		return len(ids), nil
	})
	if err == nil {
		for _, id := range rejected {
			_ = s.afterRun(ctx, id) // as Reject
		}
	}
	return k, err
}
