package store_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/pgtest"
	"github.com/forgeci/forgeci/shared/store"
)

// TestInputError: PostgreSQL's refusals of a value's bytes (a NUL or
// invalid UTF-8 in text, \u0000 in jsonb) are the client's EInvalid; its
// other errors, a cast's included, are not mapped (they may be bugs).
func TestInputError(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	cases := []struct {
		name, sql string
		arg       any
		client    bool
	}{
		{"NUL in text", `SELECT $1::text`, "a\x00b", true},
		{"invalid UTF-8 in text", `SELECT $1::text`, "a\xffb", true},
		{"NUL escape in jsonb", `SELECT $1::text::jsonb`, `{"a": "\u0000"}`, true},
		{"a cast of the server's", `SELECT $1::text::uuid`, "not-a-uuid", false},
		{"a bad timestamp", `SELECT $1::text::timestamptz`, "nope", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out string
			err := pool.QueryRow(ctx, c.sql, c.arg).Scan(&out)
			if err == nil {
				t.Fatal("PostgreSQL took it")
			}
			got := store.InputError(err)
			if c.client != (got != nil) {
				t.Fatalf("InputError(%v) = %v, want client's: %v", err, got, c.client)
			}
			if got != nil && domain.ErrorCode(got) != domain.EInvalid {
				t.Fatalf("code %s, want invalid", domain.ErrorCode(got))
			}
		})
	}
	if store.InputError(errors.New("not PostgreSQL's")) != nil {
		t.Fatal("an error of another kind was mapped")
	}
}

// TestCheckText names what holds the bad bytes.
func TestCheckText(t *testing.T) {
	for s, want := range map[string]string{"ok é": "", "a\x00": "NUL", "a\xff": "UTF-8", "": ""} {
		err := store.CheckText("field x", s)
		if (want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "field x") || domain.ErrorCode(err) != domain.EInvalid)) {
			t.Errorf("CheckText(%q) = %v, want %q", s, err, want)
		}
	}
}

// TestForeignCursors: a cursor this server never gave out (a part that is
// not the time the query compares, a NUL, the wrong number of parts) is
// refused as such, not passed to the query; the server's own cursors page
// on. An unknown delivery state is refused, naming the states.
func TestForeignCursors(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	root := pgtest.Admin(t, s, "root")
	for _, name := range []string{"a", "b", "c"} {
		reg, _, err := s.CreateRegistrationToken(ctx, time.Minute, "test", store.Scope{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.RegisterRunner(ctx, reg, name, []string{}); err != nil {
			t.Fatal(err)
		}
	}
	// A delivery, so that the query's cast meets a row.
	p := pgtest.Project(t, s, "p")
	addRepository(t, s, p.ID)
	if _, err := s.RecordDelivery(ctx, "delivery-1", "push", 5, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	cursor := func(parts ...string) string {
		raw, _ := json.Marshal(parts)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	lists := map[string]func(store.Page) error{
		"runners": func(pg store.Page) error { _, _, err := s.ListRunners(ctx, pg); return err },
		"deliveries": func(pg store.Page) error {
			_, _, err := s.Deliveries(ctx, root, "", pg)
			return err
		},
	}
	foreign := map[string]string{
		"not a time":      cursor("nope", "x"),
		"a date only":     cursor("2024-01-02", "x"),
		"NUL in the time": cursor("2024-01-02T03:04:05Z\x00", "x"),
		"NUL in the key":  cursor(time.Now().Format(time.RFC3339Nano), "x\x00"),
		"one part":        cursor(time.Now().Format(time.RFC3339Nano)),
		"not base64":      "%%%",
		// Times Go parses and PostgreSQL's timestamptz refuses.
		"year zero":        cursor("0000-01-01T00:00:00Z", "x"),
		"year zero in UTC": cursor("0001-01-01T00:00:00+01:00", "x"),
	}
	for list, call := range lists {
		for name, c := range foreign {
			err := call(store.Page{Cursor: c})
			if domain.ErrorCode(err) != domain.EInvalid || !strings.Contains(err.Error(), "not one this server gave out") {
				t.Errorf("%s, %s: %v", list, name, err)
			}
		}
		if err := call(store.Page{Cursor: cursor(time.Now().Format(time.RFC3339Nano), "x")}); err != nil {
			t.Errorf("%s, a cursor of the server's form: %v", list, err)
		}
		// An offset PostgreSQL refuses (it allows ±15:59) is read in UTC.
		if err := call(store.Page{Cursor: cursor("2024-01-01T00:00:00+23:59", "x")}); err != nil {
			t.Errorf("%s, a time with a large offset: %v", list, err)
		}
	}
	// The server's own cursor pages on.
	first, next, err := s.ListRunners(ctx, store.Page{Limit: 2})
	if err != nil || len(first) != 2 || next == "" {
		t.Fatalf("first page: %d %q %v", len(first), next, err)
	}
	rest, _, err := s.ListRunners(ctx, store.Page{Limit: 2, Cursor: next})
	if err != nil || len(rest) != 1 || rest[0].ID == first[0].ID || rest[0].ID == first[1].ID {
		t.Fatalf("second page: %+v %v", rest, err)
	}
	// A cursor part with NUL in a list keyed by name.
	if _, _, err := s.ListProjects(ctx, root, store.Page{Cursor: cursor("a\x00")}); domain.ErrorCode(err) != domain.EInvalid {
		t.Errorf("projects, NUL in the name: %v", err)
	}
	_, _, err = s.Deliveries(ctx, root, "NOPE", store.Page{})
	if domain.ErrorCode(err) != domain.EInvalid || !strings.Contains(err.Error(), "PENDING, DONE, IGNORED, FAILED") {
		t.Errorf("unknown state: %v", err)
	}
	if ds, _, err := s.Deliveries(ctx, root, store.DeliveryPending, store.Page{}); err != nil || len(ds) != 1 {
		t.Errorf("a known state: %v %v", ds, err)
	}
}

// A delivery whose pipeline error quotes a NUL byte or bytes that are not
// UTF-8 (a key of the commit's .forgeci.yml) is still failed, with its
// notice: the message is stored with U+FFFD in their place.
func TestDeliveryErrorWithBadBytes(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t, store.Limits{})
	p := pgtest.Project(t, s, "p")
	addRepository(t, s, p.ID)
	d := claimedDelivery(t, s, "delivery-1")
	cause := errors.New(".forgeci.yml: jobs.a\x00b: not a job; \xff\xfe")
	if err := s.FailDeliveryWithNotice(ctx, d, cause, strings.Repeat("ab", 20), "forgeci"); err != nil {
		t.Fatalf("fail with notice: %v", err)
	}
	var state, last string
	if err := s.Pool().QueryRow(ctx, `SELECT state, last_error FROM scm_deliveries WHERE guid = 'delivery-1'`).Scan(&state, &last); err != nil {
		t.Fatal(err)
	}
	if state != store.DeliveryFailed || last != ".forgeci.yml: jobs.a\uFFFDb: not a job; \uFFFD" {
		t.Fatalf("delivery %s %q", state, last)
	}
	var notices int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM check_runs`).Scan(&notices); err != nil || notices != 1 {
		t.Fatalf("%d notices (%v)", notices, err)
	}
}
