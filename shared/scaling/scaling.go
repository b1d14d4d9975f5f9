// Package scaling drives EC2 Auto Scaling groups of ephemeral runners
// (infra/runner-ec2.yaml, Scaling=elastic) from the queue: a group goes
// out when a job its runners would take has waited longer than its wait,
// and back to zero once nothing was queued or running for its idle
// period. A job several groups cover counts for one of them (share).
// Each instance runs one job (`forgeci-runner --ephemeral`) and
// ends itself, lowering the desired capacity; one that finds no job ends
// after its own idle time. Instances are protected from scale-in, so
// lowering the desired capacity never stops a job: it only stops the group
// from replacing the instances that end.
//
// The scaler is invoked every minute and asks PostgreSQL nothing while its
// groups are at zero and no job was queued since its last look (the queue
// hint, package wake).
package scaling

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/store"
	"github.com/forgeci/forgeci/shared/wake"
)

// Group is one Auto Scaling group of ephemeral runners.
type Group struct {
	// ASG is the Auto Scaling group's name.
	ASG string `json:"asg"`
	// Labels are its runners' labels; Runner the name they registered
	// under (one identity for the whole group).
	Labels []string `json:"labels"`
	Runner string   `json:"runner"`
	// Max bounds the desired capacity (the group's MaxSize).
	Max int `json:"max"`
	// WaitSeconds: how long a job waits before the group goes out;
	// IdleSeconds: how long with nothing queued or running before it
	// goes back to zero.
	WaitSeconds int `json:"wait_seconds"`
	IdleSeconds int `json:"idle_seconds"`
}

// ParseGroups reads FORGECI_SCALE_GROUPS (a JSON list of Group), checking
// every field.
func ParseGroups(raw string) ([]Group, error) {
	if raw == "" {
		return nil, nil // no group: the scaler does nothing
	}
	var gs []Group
	if err := json.Unmarshal([]byte(raw), &gs); err != nil {
		return nil, fmt.Errorf("scale groups: %w", err)
	}
	seen, runners := map[string]bool{}, map[string]bool{}
	for i, g := range gs {
		switch {
		case g.ASG == "" || seen[g.ASG]:
			return nil, fmt.Errorf("scale group %d: asg is required and must be unique", i)
		case len(g.Labels) == 0 || g.Runner == "":
			return nil, fmt.Errorf("scale group %s: labels and runner are required", g.ASG)
		case runners[g.Runner]:
			// A group's demand is read by its runner's name: two groups of
			// one name would count each other's jobs as their own.
			return nil, fmt.Errorf("scale group %s: runner %q is another group's: each group needs a runner name of its own", g.ASG, g.Runner)
		case g.Max < 1 || g.Max > 1000:
			return nil, fmt.Errorf("scale group %s: max must be 1 to 1000", g.ASG)
		case g.WaitSeconds < 0 || g.IdleSeconds < 60:
			return nil, fmt.Errorf("scale group %s: wait_seconds must be at least 0 and idle_seconds at least 60", g.ASG)
		}
		if err := domain.ValidateLabels(g.Labels); err != nil {
			return nil, fmt.Errorf("scale group %s: %w", g.ASG, err)
		}
		seen[g.ASG], runners[g.Runner] = true, true
	}
	return gs, nil
}

// Groups is the Auto Scaling API the scaler needs (autoscaling.go; a fake
// in tests, through the SDK's endpoint override).
type Groups interface {
	// Desired reads the named groups' capacities; a group that does not
	// exist is not in the map.
	Desired(ctx context.Context, names []string) (map[string]Capacity, error)
	SetDesired(ctx context.Context, name string, n int) error
}

// Scaler decides each group's desired capacity.
type Scaler struct {
	Store  *store.Store
	ASG    Groups
	Groups []Group
	Log    *slog.Logger
	// Now is the clock the idle period is measured on (the database's
	// times are compared with it; tests set it).
	Now func() time.Time
}

// Capacity is a group's desired capacity and its maximum size.
type Capacity struct{ Desired, Max int }

// scalerNote is where the scaler keeps the queue token of its last look
// and, after a space, when a probe for jobs no group's runner can take
// is next due (RFC 3339; none: nothing).
const scalerNote = "scaler"

// parseScalerNote reads the note; a probe time it cannot read is due now
// (toward a look, never none).
func parseScalerNote(raw string) (token string, probeAt time.Time) {
	token, at, found := strings.Cut(raw, " ")
	if !found {
		return token, time.Time{}
	}
	probeAt, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return token, time.Unix(0, 0)
	}
	return token, probeAt
}

func scalerNoteOf(token string, probeAt time.Time) string {
	if probeAt.IsZero() {
		return token
	}
	return token + " " + probeAt.UTC().Format(time.RFC3339Nano)
}

// Run is one invocation: it reads the groups' desired capacities (no
// database), and asks PostgreSQL only if a group is above zero or a job
// was queued since the last look.
func (s *Scaler) Run(ctx context.Context) error {
	if len(s.Groups) == 0 {
		return nil
	}
	names := make([]string, len(s.Groups))
	for i, g := range s.Groups {
		names[i] = g.ASG
	}
	desired, err := s.ASG.Desired(ctx, names)
	if err != nil {
		return err
	}
	b := s.Store.Board()
	var qs wake.QueueState
	if b != nil {
		raw, _ := b.GetNote(ctx, scalerNote)
		seen, probeAt := parseScalerNote(raw)
		qs = b.Queue(ctx, seen)
		if qs.Idle && allZero(desired) && (probeAt.IsZero() || s.Now().Before(probeAt)) {
			return nil
		}
		if qs.Missing {
			// No job was ever queued: make the hint later looks compare.
			if err := b.MarkQueued(ctx, b.Now()); err != nil {
				return err
			}
		}
	}
	looks, errs := s.look(ctx, desired)
	share(looks, s.Now())
	waiting, probeAt := false, time.Time{}
	for _, l := range looks {
		errs = append(errs, s.decide(ctx, l))
		waiting = waiting || l.d.Queued > 0 || l.d.Probe > 0
		if at := s.nextProbe(l.d); !at.IsZero() && (probeAt.IsZero() || at.Before(probeAt)) {
			probeAt = at
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // the token stays: the next invocation looks again
	}
	// A job a group could take is queued, not yet for its wait: keep
	// looking (the token, once noted, would say nothing changed). Jobs
	// that need features a group's runner lacks are looked at again when
	// their next probe is due, not every minute: else the database would
	// never pause while one waits.
	if b != nil && qs.Token != "" && !waiting {
		return b.SetNote(ctx, scalerNote, scalerNoteOf(qs.Token, probeAt))
	}
	return nil
}

// nextProbe is when the group's queued jobs that need features its runner
// lacks are next due a probe instance (zero: none waits): an hour after
// its runner last polled (see store.GroupDemand), and a minute more for
// the clocks.
func (s *Scaler) nextProbe(d store.Demand) time.Time {
	switch {
	case d.Unfit == 0:
		return time.Time{}
	case d.LastSeen == nil:
		return s.Now()
	}
	return d.LastSeen.Add(time.Hour + time.Minute)
}

func allZero(m map[string]Capacity) bool {
	for _, c := range m {
		if c.Desired != 0 {
			return false
		}
	}
	return true
}

// groupLook is what one invocation learnt of a group, and the queued
// jobs share gave it.
type groupLook struct {
	g Group
	c Capacity
	d store.Demand
	// lastOut is the group's last scale-out (zero: none noted); stalled
	// says its runner has not polled since, bootAllowance on.
	lastOut time.Time
	stalled bool
	// queued and waiting count the jobs given to the group; mine are
	// their IDs.
	queued, waiting int
	mine            map[string]bool
}

// look reads the demand of each group Auto Scaling has, with as many of
// its queued jobs as all the groups could take together.
func (s *Scaler) look(ctx context.Context, desired map[string]Capacity) ([]*groupLook, []error) {
	room := 0
	for _, g := range s.Groups {
		room += min(g.Max, desired[g.ASG].Max)
	}
	var looks []*groupLook
	var errs []error
	for _, g := range s.Groups {
		c, ok := desired[g.ASG]
		if !ok {
			// A group deleted, or misnamed: the others still scale.
			s.Log.Warn("auto scaling group not found; not scaled", "group", g.ASG)
			continue
		}
		d, err := s.Store.GroupDemand(ctx, g.Labels, time.Duration(g.WaitSeconds)*time.Second, g.Runner, room)
		if err == nil {
			l := &groupLook{g: g, c: c, d: d}
			// A group whose last scale-out cannot be read is not scaled:
			// it might have stalled.
			if err = s.stall(ctx, l); err == nil {
				looks = append(looks, l)
			}
		}
		errs = append(errs, err)
	}
	return looks, errs
}

// share gives each queued job to one group, so that a job several groups'
// labels cover brings one instance, not one in each. Groups take the jobs
// they could run in queue order, up to their room (their maximum less the
// jobs their runner runs): first the group with the shortest wait, which
// would go out for a job first (of equal waits, the first configured),
// so that where a job goes does not change as it waits; groups whose
// instances stalled last (they take only jobs no other group has room
// for). With a long wait, a group is the others' overflow. Jobs go first
// to the instances a group has out already, so that a group does not go
// out for jobs another's booting instances will take.
func share(looks []*groupLook, now time.Time) {
	order := slices.Clone(looks)
	slices.SortStableFunc(order, func(a, b *groupLook) int {
		if a.stalled != b.stalled {
			if a.stalled {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.g.WaitSeconds, b.g.WaitSeconds)
	})
	taken := map[string]bool{}
	// First to the instances out already (booting, or idle): they will
	// claim jobs whichever group counts them.
	for _, l := range order {
		l.take(taken, l.c.Desired-l.d.Running, now)
	}
	for _, l := range order {
		l.take(taken, min(l.g.Max, l.c.Max)-l.d.Running, now)
	}
}

// take gives l the jobs not taken yet while it has fewer than room. A
// job still queued bootAllowance after it waited l's wait is l's but not
// l's alone: l's instances did not take it (a spot type without capacity,
// say), and the other groups may go out for it too.
func (l *groupLook) take(taken map[string]bool, room int, now time.Time) {
	overdue := time.Duration(l.g.WaitSeconds)*time.Second + bootAllowance
	for _, j := range l.d.Jobs {
		if l.queued >= room {
			return
		}
		if taken[j.ID] || l.mine[j.ID] {
			continue
		}
		taken[j.ID] = now.Sub(j.QueuedAt) < overdue
		if l.mine == nil {
			l.mine = map[string]bool{}
		}
		l.mine[j.ID] = true
		l.queued++
		if j.Waited {
			l.waiting++
		}
	}
}

// decide sets one group's desired capacity from the jobs share gave it.
func (s *Scaler) decide(ctx context.Context, l *groupLook) error {
	g, d := l.g, l.d
	queued, waiting := l.queued, l.waiting
	if d.Queued == 0 {
		queued, waiting = d.Probe, d.ProbeWaited
	}
	desired := l.c.Desired
	target := desired
	switch {
	case waiting > 0:
		// Every queued job gets an instance beside those running, up to
		// the configured maximum and the group's own (past which Auto
		// Scaling refuses the whole change).
		target = max(desired, min(g.Max, l.c.Max, d.Running+queued))
	case queued == 0 && d.Running == 0 && desired > 0 && s.idleFor(d) >= time.Duration(g.IdleSeconds)*time.Second:
		target = 0
	}
	var err error
	if target > desired {
		if target, err = s.unlessStalled(ctx, l, desired, target); err != nil {
			return err
		}
	}
	if target == desired {
		return nil
	}
	s.Log.Info("scale", "group", g.ASG, "from", desired, "to", target, "queued", queued, "waiting", waiting, "running", d.Running,
		"queue_covered", d.Queued)
	return s.ASG.SetDesired(ctx, g.ASG, target)
}

// bootAllowance is how long a scaled-out instance may take to boot and
// poll before the scaler takes its silence for a failure.
const bootAllowance = 10 * time.Minute

// stall reads the group's last scale-out, and whether its runner has not
// polled since, bootAllowance on or more: its instances then end without
// a job (a registration token expired, a wrong binary or server URL), and
// raising the capacity again would keep the group full of them for as
// long as jobs wait.
func (s *Scaler) stall(ctx context.Context, l *groupLook) error {
	b := s.Store.Board()
	if b == nil {
		return nil
	}
	raw, err := b.GetNote(ctx, outNote(l.g))
	if err != nil {
		return err
	}
	last, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return nil // none noted: nothing is held back
	}
	l.lastOut = last
	l.stalled = s.Now().Sub(last) >= bootAllowance && (l.d.LastSeen == nil || l.d.LastSeen.Before(last))
	return nil
}

func outNote(g Group) string { return "scaler-out-" + g.ASG }

// unlessStalled is the target of a scale-out, unless the group stalled:
// then one instance is tried an hour after the last scale-out, and the
// log says why. Each scale-out is noted on the board.
func (s *Scaler) unlessStalled(ctx context.Context, l *groupLook, desired, target int) (int, error) {
	b := s.Store.Board()
	if b == nil {
		return target, nil
	}
	now := s.Now()
	if l.stalled {
		s.Log.Error("the group's instances did not poll after its last scale-out: check its registration token, binary and server URL",
			"group", l.g.ASG, "runner", l.g.Runner, "last_scale_out", l.lastOut, "runner_last_seen", l.d.LastSeen)
		if now.Sub(l.lastOut) < time.Hour {
			return desired, nil
		}
		target = desired + 1
	}
	return target, b.SetNote(ctx, outNote(l.g), now.UTC().Format(time.RFC3339Nano))
}

// idleFor is how long since the group's runner last ended a job (forever
// if it never did).
func (s *Scaler) idleFor(d store.Demand) time.Duration {
	if d.LastEnded == nil {
		return time.Duration(1<<63 - 1)
	}
	return s.Now().Sub(*d.LastEnded)
}
