package domain

import (
	"reflect"
	"testing"
)

func TestNeedCycles(t *testing.T) {
	cases := []struct {
		name string
		jobs [][]string // jobs[i][0] is the name, the rest its needs
		want []NeedCycle
	}{
		{"acyclic", [][]string{{"a"}, {"b", "a"}, {"c", "a", "b"}}, nil},
		{"two", [][]string{{"a", "b"}, {"b", "a"}}, []NeedCycle{{Job: 0, Path: []string{"a", "b", "a"}}}},
		{"self", [][]string{{"a", "a"}}, []NeedCycle{{Job: 0, Path: []string{"a", "a"}}}},
		{"unknown needs are passed over", [][]string{{"a", "ghost"}}, nil},
		{"path from the start of the walk", [][]string{{"x", "a"}, {"a", "b"}, {"b", "a"}},
			[]NeedCycle{{Job: 1, Path: []string{"x", "a", "b", "a"}}}},
		{"one per walk", [][]string{{"a", "b"}, {"b", "a"}, {"c", "d"}, {"d", "c"}},
			[]NeedCycle{{Job: 0, Path: []string{"a", "b", "a"}}, {Job: 2, Path: []string{"c", "d", "c"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			names := make([]string, len(c.jobs))
			for i, j := range c.jobs {
				names[i] = j[0]
			}
			got := NeedCycles(names, func(i int) []string { return c.jobs[i][1:] })
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
