package pipeline

import (
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/robfig/cron/v3"

	"github.com/forgeci/forgeci/shared/domain"
)

// Missed-slot policies of a schedule: a slot that passed while the control
// plane was down fires once on recovery, or is skipped.
const (
	MissedRunOnce = "run-once"
	MissedSkip    = "skip"
)

// cronParser reads GitHub's five-field cron (minute hour day-of-month
// month day-of-week, UTC), without descriptors such as @daily.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// maxSchedules bounds a pipeline's schedule entries.
const maxSchedules = 20

// schedules reads on.schedule: a list of {cron, missed}.
func (p *parseState) schedules(v ast.Node, path string) []domain.Schedule {
	seq, ok := p.sequence(v, path)
	if !ok {
		return nil
	}
	if len(seq) == 0 || len(seq) > maxSchedules {
		p.errorf(v, path, "schedule holds 1 to %d entries", maxSchedules)
		return nil
	}
	seen := map[string]bool{}
	return eachMapping(p, seq, path, func(n ast.Node, sp string, kvs []*ast.MappingValueNode) domain.Schedule {
		s := domain.Schedule{Missed: MissedRunOnce}
		p.keys(kvs, sp, "cron or missed", map[string]func(ast.Node, string){
			"cron": func(v ast.Node, kp string) {
				c, ok := p.str(v, kp)
				if !ok {
					return
				}
				if _, err := ParseCron(c); err != nil {
					p.errorf(v, kp, "%v", err)
					return
				}
				s.Cron = strings.Join(strings.Fields(c), " ")
			},
			"missed": func(v ast.Node, kp string) {
				if s.Missed, _ = p.str(v, kp); s.Missed != MissedRunOnce && s.Missed != MissedSkip {
					p.errorf(v, kp, "missed is run-once (a slot missed while ForgeCI was down fires once when it is back) or skip")
				}
			},
		})
		switch {
		case s.Cron == "":
			p.errorf(n, sp+".cron", "cron is required")
		case seen[s.Cron]:
			p.errorf(n, sp+".cron", "cron %q is listed twice", s.Cron)
		}
		seen[s.Cron] = true
		return s
	})
}

// ParseCron reads a five-field cron expression, in UTC.
func ParseCron(c string) (cron.Schedule, error) {
	if len(strings.Fields(c)) != 5 {
		return nil, domain.Errorf(domain.EInvalid, "cron %q is five fields: minute hour day-of-month month day-of-week (UTC)", c)
	}
	s, err := cronParser.Parse(c)
	if err != nil {
		return nil, domain.Errorf(domain.EInvalid, "cron %q: %v", c, err)
	}
	// A year of slots from a fixed day: none means it never fires; two
	// closer than GitHub's shortest interval are refused, as GitHub's.
	t := s.Next(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	if t.IsZero() {
		return nil, domain.Errorf(domain.EInvalid, "cron %q never fires", c)
	}
	for range 400 {
		next := s.Next(t)
		if next.IsZero() {
			break
		}
		if next.Sub(t) < minScheduleInterval {
			return nil, domain.Errorf(domain.EInvalid, "cron %q fires more often than every 5 minutes, the shortest interval", c)
		}
		t = next
	}
	return s, nil
}

// minScheduleInterval is GitHub's shortest schedule interval.
const minScheduleInterval = 5 * time.Minute
