package notify

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/forgeci/forgeci/shared/store"
)

// TestPublic: only public addresses may be hooks': every special range,
// in IPv4, IPv6 and IPv4-mapped IPv6, is refused.
func TestPublic(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0", "0.1.2.3",
		"100.64.0.1", "198.18.0.1", "240.0.0.1", "255.255.255.255", "224.0.0.1", "::1", "::", "fe80::1", "fc00::1", "fd00::1",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "192.0.0.8"} {
		if public(netip.MustParseAddr(a)) {
			t.Errorf("%s taken as public", a)
		}
	}
	for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:8.8.8.8"} {
		if !public(netip.MustParseAddr(a)) {
			t.Errorf("%s refused", a)
		}
	}
}

// TestSlackBody: a Slack body escapes what could be read as a link or a
// mention.
func TestSlackBody(t *testing.T) {
	d := &Deliverer{PublicURL: "https://ci.example.com"}
	b := d.body(store.NotifyWork{ID: 1, Event: "branch_failed", Format: "slack", Project: "acme/app", RunID: "r1",
		RunNumber: 7, RunState: "FAILED", GitRef: "refs/heads/x<!channel>&y"})
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if want := "acme/app #7 FAILED: failed (the branch was passing) on x&lt;!channel&gt;&amp;y <https://ci.example.com/runs/r1|view the run>"; m["text"] != want {
		t.Fatalf("slack text %q", m["text"])
	}
	if strings.Contains(m["text"], "<!channel>") {
		t.Fatal("a mention got through")
	}
}
