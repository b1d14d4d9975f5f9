package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forgeci/forgeci/shared/api"
	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/cas/castest"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/idtoken"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

type env struct {
	t       *testing.T
	srv     *httptest.Server
	store   *store.Store
	cas     *cas.Store
	pool    *pgxpool.Pool
	project store.Project // acme/app, where createRun makes runs
	issuer  *idtoken.Issuer
	server  *api.Server
}

func setup(t *testing.T) *env {
	t.Helper()
	pool := pgtest.NewPool(t)
	st := store.New(pool, store.Limits{LeaseTTL: 30 * time.Second, MaxLogBytes: 1 << 20})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	blobs := castest.New(t)
	st.SetObjects(blobs)
	server := &api.Server{Store: st, CAS: blobs, Log: log}
	srv := httptest.NewServer(server.Handler())
	t.Cleanup(srv.Close)
	// Before any request: the issuer is the URL served.
	issuer, err := idtoken.NewKeyFile(srv.URL, testKeyFile(t))
	if err != nil {
		t.Fatal(err)
	}
	server.IDTokens = issuer
	return &env{t: t, srv: srv, store: st, cas: blobs, pool: pool, project: pgtest.Project(t, st, "acme/app"), issuer: issuer,
		server: server}
}

var keyFile struct {
	once sync.Once
	path string
}

// testKeyFile is one identity-token key file for the package's tests
// (an RSA key is slow to make).
func testKeyFile(t *testing.T) string {
	keyFile.once.Do(func() {
		dir, err := os.MkdirTemp("", "forgeci-api-oidc-")
		if err != nil {
			t.Fatal(err)
		}
		keyFile.path = filepath.Join(dir, "oidc-key.pem")
	})
	return keyFile.path
}

type runnerCreds struct {
	ID, Token string
}

// registerRunner registers a runner through the real route.
func (e *env) registerRunner(name string, labels ...string) runnerCreds {
	e.t.Helper()
	reg, _, err := e.store.CreateRegistrationToken(context.Background(), time.Minute, "test", store.Scope{Untrusted: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if labels == nil {
		labels = []string{}
	}
	status, body := e.post("/v1/runners/register", "", map[string]any{"registration_token": reg, "name": name, "labels": labels})
	if status != http.StatusCreated {
		e.t.Fatalf("register: %d %s", status, body)
	}
	var out struct{ RunnerID, Token string }
	out.RunnerID, out.Token = str(body, "runner_id"), str(body, "token")
	return runnerCreds{ID: out.RunnerID, Token: out.Token}
}

// createRun creates a run of jobs; a job "name:need1,need2" needs others.
func (e *env) createRun(jobs ...string) store.Run {
	e.t.Helper()
	nr := store.NewRun{Project: "acme/app"}
	for _, j := range jobs {
		name, needs, _ := strings.Cut(j, ":")
		nj := store.NewJob{Name: name, Spec: domain.JobSpec{Steps: []domain.Step{{Name: "s", Run: "true"}}}}
		if needs != "" {
			nj.Needs = strings.Split(needs, ",")
		}
		nr.Jobs = append(nr.Jobs, nj)
	}
	run, err := e.store.CreateRun(context.Background(), nr)
	if err != nil {
		e.t.Fatal(err)
	}
	return run
}

func (e *env) claim(r runnerCreds) protocol.Claim {
	e.t.Helper()
	status, body := e.post("/v1/runner/claim", r.Token, map[string]any{"wait_seconds": 0, "features": []string{domain.FeatureIDToken}})
	if status != http.StatusOK {
		e.t.Fatalf("claim: %d %s", status, body)
	}
	var c protocol.Claim
	if err := json.Unmarshal(body, &c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// post sends a JSON body (or raw bytes when body is []byte).
func (e *env) post(path, token string, body any) (int, []byte) {
	e.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			e.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, bytes.NewReader(raw))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) jobState(jobID string) string {
	e.t.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT state FROM jobs WHERE id = $1`, jobID).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// snapshot renders every row that a runner route could change, so that a
// rejected call can be shown to have changed nothing.
func (e *env) snapshot() string {
	e.t.Helper()
	var b strings.Builder
	b.WriteString(e.snapshotOf("runs", "jobs", "job_attempts", "log_chunks", "job_steps", "job_reports", "artifacts",
		"caches", "pending_caches", "blobs", "runners", "registration_tokens", "projects", "id_tokens"))
	objects, err := e.cas.List(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, o := range objects {
		fmt.Fprintf(&b, "s3 %s %d %s\n", o.Key, o.Size, o.ETag)
	}
	return b.String()
}

// rowText renders a row t of table as the snapshots compare it: all of
// it, but a user token's last use, which any request the token
// authenticates notes, refused ones too (the one change they make).
func rowText(table string) string {
	if table == "user_tokens" {
		return `(to_jsonb(t) - 'last_used_at')::text`
	}
	return `to_jsonb(t)::text`
}

// snapshotOf renders the rows of tables, in a stable order.
func (e *env) snapshotOf(tables ...string) string {
	e.t.Helper()
	var b strings.Builder
	for _, table := range tables {
		rows, err := e.pool.Query(context.Background(), `SELECT `+rowText(table)+` FROM `+table+` t ORDER BY 1`)
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				e.t.Fatal(err)
			}
			b.WriteString(table + " " + s + "\n")
		}
		rows.Close()
	}
	return b.String()
}

// putBlob stores data in the CAS namespace of acme/app's trusted runs
// (unregistered) and returns its digest.
func (e *env) putBlob(data []byte) (string, int64) {
	e.t.Helper()
	h := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(h[:])
	key := cas.BlobKey(e.project.ID, true, d)
	if err := e.cas.Put(context.Background(), key, d, bytes.NewReader(data), int64(len(data))); err != nil {
		e.t.Fatal(err)
	}
	return d, int64(len(data))
}

func errCode(body []byte) string {
	var v struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(body, &v)
	return v.Error.Code
}

func str(body []byte, field string) string {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	s, _ := m[field].(string)
	return s
}

func leaseBody(l domain.Lease, extra map[string]any) map[string]any {
	m := map[string]any{"lease": l}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}
