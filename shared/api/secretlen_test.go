package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
)

// TestSecretTooShortToMask: a secret value under 4 bytes is refused with
// 400 naming the reason (it could not be masked in logs); nothing is
// stored.
func TestSecretTooShortToMask(t *testing.T) {
	e := setup(t)
	admin := e.user("root", store.RoleAdmin)
	for _, v := range []string{"", "a", "abc"} {
		st, body := e.post("/v1/projects/"+e.project.ID+"/secrets", admin, map[string]any{"name": "SHORT", "value": v})
		if st != http.StatusBadRequest || errCode(body) != domain.EInvalid || !strings.Contains(string(body), "cannot be masked in logs") {
			t.Fatalf("value %q: %d %s", v, st, body)
		}
	}
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM project_secrets`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d secrets stored (%v)", n, err)
	}
}
