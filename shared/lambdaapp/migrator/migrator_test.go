package migrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/forgeci/forgeci/shared/pgtest"
)

// The migrate function's connection begun at cold start: taken by the
// first event only, tried again when it failed, and never waited for
// past the event's time.
func TestMigrationsEarlyConnection(t *testing.T) {
	t.Setenv("FORGECI_DATABASE_URL", pgtest.EmptyDatabase(t, fmt.Sprintf("early_migrate_%d", time.Now().UnixNano())))
	ctx := context.Background()
	create, update := cfn.Event{RequestType: cfn.RequestCreate}, cfn.Event{RequestType: cfn.RequestUpdate}

	// It failed (a database resuming, say): the event connects itself.
	failed := &EarlyDB{done: make(chan struct{}), err: errors.New("resuming")}
	close(failed.done)
	if _, data, err := Migrations(ctx, create, failed); err != nil || data["Applied"] == 0 {
		t.Fatalf("after a failed early connection: %v, %v", data, err)
	}

	// The first event takes it; a later one connects afresh.
	early := ConnectEarly()
	for i := range 2 {
		if _, data, err := Migrations(ctx, update, early); err != nil || data["Applied"] != 0 {
			t.Fatalf("update %d: %v, %v", i, data, err)
		}
	}
	if _, pool, _ := early.take(ctx); pool != nil {
		t.Fatal("the early connection was handed out twice")
	}

	// It never comes up: the event answers with an error that says so
	// when its time (less the 10 s kept for the answer) is over.
	stuck := &EarlyDB{done: make(chan struct{})}
	defer close(stuck.done)
	short, cancel := context.WithTimeout(ctx, 10*time.Second+300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := Migrations(short, update, stuck)
	if err == nil || !strings.Contains(err.Error(), "begun at cold start did not come up") {
		t.Fatalf("a stuck early connection: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("answered after %s", took)
	}
}
