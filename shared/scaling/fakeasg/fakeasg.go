// Package fakeasg is an httptest fake of the two EC2 Auto Scaling
// operations ForgeCI's scaler calls (DescribeAutoScalingGroups,
// SetDesiredCapacity), in the AWS Query protocol the SDK speaks, reached
// through the SDK's endpoint override. It keeps each group's desired
// capacity, clamped to its sizes as AWS refuses out-of-range values, and
// records every change; its fault switches (fakefault) take it down or
// lose responses of applied requests, as AWS's network sometimes does.
package fakeasg

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/fakefault"
)

// Change is one applied SetDesiredCapacity.
type Change struct {
	Group   string
	Desired int
	At      time.Time
}

// ASG is the fake service.
type ASG struct {
	Server *httptest.Server
	fakefault.Switches

	mu      sync.Mutex
	groups  map[string]*group
	changes []Change
}

type group struct{ min, max, desired int }

// New starts the fake for a test; groups are added with AddGroup.
func New(t testing.TB) *ASG {
	a := Start()
	t.Cleanup(a.Server.Close)
	return a
}

// Start starts the fake (the caller closes a.Server).
func Start() *ASG {
	a := &ASG{groups: map[string]*group{}}
	a.Server = httptest.NewServer(http.HandlerFunc(a.handle))
	return a
}

// AddGroup makes an Auto Scaling group.
func (a *ASG) AddGroup(name string, min, max, desired int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.groups[name] = &group{min, max, desired}
}

// Desired is a group's desired capacity now.
func (a *ASG) Desired(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if g := a.groups[name]; g != nil {
		return g.desired
	}
	return -1
}

// Changes are the applied changes so far.
func (a *ASG) Changes() []Change {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Change{}, a.changes...)
}

// SetDesiredOutside changes a group as someone else would (an instance
// ending itself with a decrement).
func (a *ASG) SetDesiredOutside(name string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.groups[name].desired = n
}

const ns = "http://autoscaling.amazonaws.com/doc/2011-01-01/"

func (a *ASG) handle(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := r.Form.Get("Action")
	down, drop := a.Next(action)
	if down {
		writeError(w, http.StatusInternalServerError, "InternalFailure", "the service is down")
		return
	}
	serve := func(w http.ResponseWriter) { a.serve(w, action, r) }
	if drop {
		fakefault.Drop(w, serve)
		return
	}
	serve(w)
}

func (a *ASG) serve(w http.ResponseWriter, action string, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch action {
	case "DescribeAutoScalingGroups":
		type member struct {
			Name    string `xml:"AutoScalingGroupName"`
			Min     int    `xml:"MinSize"`
			Max     int    `xml:"MaxSize"`
			Desired int    `xml:"DesiredCapacity"`
		}
		var out struct {
			XMLName xml.Name `xml:"DescribeAutoScalingGroupsResponse"`
			NS      string   `xml:"xmlns,attr"`
			Groups  []member `xml:"DescribeAutoScalingGroupsResult>AutoScalingGroups>member"`
			ID      string   `xml:"ResponseMetadata>RequestId"`
		}
		out.NS, out.ID = ns, "fake"
		for i := 1; ; i++ {
			name := r.Form.Get(fmt.Sprintf("AutoScalingGroupNames.member.%d", i))
			if name == "" {
				break
			}
			if g := a.groups[name]; g != nil {
				out.Groups = append(out.Groups, member{name, g.min, g.max, g.desired})
			}
		}
		writeXML(w, out)
	case "SetDesiredCapacity":
		name := r.Form.Get("AutoScalingGroupName")
		n, err := strconv.Atoi(r.Form.Get("DesiredCapacity"))
		g := a.groups[name]
		switch {
		case g == nil:
			writeError(w, http.StatusBadRequest, "ValidationError", "AutoScalingGroup name not found - "+name)
			return
		case err != nil || n < g.min || n > g.max:
			writeError(w, http.StatusBadRequest, "ValidationError",
				fmt.Sprintf("New SetDesiredCapacity value %s is outside of the range [%d, %d]", r.Form.Get("DesiredCapacity"), g.min, g.max))
			return
		}
		g.desired = n
		a.changes = append(a.changes, Change{name, n, time.Now()})
		writeXML(w, struct {
			XMLName xml.Name `xml:"SetDesiredCapacityResponse"`
			NS      string   `xml:"xmlns,attr"`
			ID      string   `xml:"ResponseMetadata>RequestId"`
		}{NS: ns, ID: "fake"})
	default:
		writeError(w, http.StatusBadRequest, "InvalidAction", "not faked: "+action)
	}
}

func writeXML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "text/xml")
	b, _ := xml.Marshal(v)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	b, _ := xml.Marshal(struct {
		XMLName xml.Name `xml:"ErrorResponse"`
		NS      string   `xml:"xmlns,attr"`
		Type    string   `xml:"Error>Type"`
		Code    string   `xml:"Error>Code"`
		Message string   `xml:"Error>Message"`
		ID      string   `xml:"RequestId"`
	}{NS: ns, Type: "Sender", Code: code, Message: msg, ID: "fake"})
	_, _ = w.Write(b)
}
