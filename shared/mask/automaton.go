package mask

// automaton is an Aho–Corasick matcher over byte patterns. Nodes are kept
// in one slice, children as a first-child/next-sibling list, so that a
// long pattern (a PEM key, its base64) costs one small node per byte and
// no allocation of its own. The root has a full table: most steps of
// ordinary log text fall back to it.
type automaton struct {
	nodes []node
	root  [256]int32
	// tables are the full child tables of the nodes with many children:
	// patterns that share a prefix and differ in the next byte (values a
	// step asks to mask can be made so) would make each step walk a
	// sibling list of up to 256.
	tables [][256]int32
}

// wideNode is the number of children from which a node gets a full table.
const wideNode = 8

type node struct {
	child   int32  // first child, 0 when none (0 is the root, never a child)
	sibling int32  // next child of the same parent, 0 when none
	fail    int32  // longest proper suffix that is also a trie node
	out     uint16 // length of the longest pattern ending here (via fail too)
	depth   uint16 // length of the string this node spells
	keep    uint16 // depth of the deepest node on the fail chain with a child
	table   int32  // index+1 of its full child table in tables, 0 when none
	b       byte
}

// newAutomaton builds the matcher; every pattern must be 1 to 65535 bytes.
func newAutomaton(patterns [][]byte) *automaton {
	a := &automaton{nodes: make([]node, 1, 1+totalLen(patterns))}
	for _, p := range patterns {
		a.insert(p)
	}
	a.tabulate()
	a.link()
	return a
}

// tabulate gives each node with wideNode children or more a full table.
func (a *automaton) tabulate() {
	for n := 1; n < len(a.nodes); n++ {
		count := 0
		for c := a.nodes[n].child; c != 0 && count < wideNode; c = a.nodes[c].sibling {
			count++
		}
		if count < wideNode {
			continue
		}
		var t [256]int32
		for c := a.nodes[n].child; c != 0; c = a.nodes[c].sibling {
			t[a.nodes[c].b] = c
		}
		a.tables = append(a.tables, t)
		a.nodes[n].table = int32(len(a.tables))
	}
}

func totalLen(ps [][]byte) int {
	n := 0
	for _, p := range ps {
		n += len(p)
	}
	return n
}

func (a *automaton) insert(p []byte) {
	cur := int32(0)
	for _, b := range p {
		next := a.child(cur, b)
		if next == 0 {
			next = int32(len(a.nodes))
			a.nodes = append(a.nodes, node{b: b, depth: a.nodes[cur].depth + 1, sibling: a.nodes[cur].child})
			a.nodes[cur].child = next
			if cur == 0 {
				a.root[b] = next
			}
		}
		cur = next
	}
	a.nodes[cur].out = uint16(len(p))
}

// child is the trie edge from n on b, 0 when there is none.
func (a *automaton) child(n int32, b byte) int32 {
	if n == 0 {
		return a.root[b]
	}
	if t := a.nodes[n].table; t != 0 {
		return a.tables[t-1][b]
	}
	for c := a.nodes[n].child; c != 0; c = a.nodes[c].sibling {
		if a.nodes[c].b == b {
			return c
		}
	}
	return 0
}

// link sets fail links breadth first, and out to the longest pattern that
// ends at each node, its own or one reached through fail links.
func (a *automaton) link() {
	queue := make([]int32, 0, len(a.nodes))
	for c := a.nodes[0].child; c != 0; c = a.nodes[c].sibling {
		queue = append(queue, c) // depth 1 fails to the root (0)
		if a.nodes[c].child != 0 {
			a.nodes[c].keep = 1
		}
	}
	for i := 0; i < len(queue); i++ {
		n := queue[i]
		for c := a.nodes[n].child; c != 0; c = a.nodes[c].sibling {
			f := a.step(a.nodes[n].fail, a.nodes[c].b)
			a.nodes[c].fail = f
			a.nodes[c].out = max(a.nodes[c].out, a.nodes[f].out)
			a.nodes[c].keep = a.nodes[f].keep // nodes nearer the root are set
			if a.nodes[c].child != 0 {
				a.nodes[c].keep = a.nodes[c].depth
			}
			queue = append(queue, c)
		}
	}
}

// step is the state after reading b in state n.
func (a *automaton) step(n int32, b byte) int32 {
	for {
		if c := a.child(n, b); c != 0 {
			return c
		}
		if n == 0 {
			return 0
		}
		n = a.nodes[n].fail
	}
}

// span is a masked byte range [lo, hi) at absolute stream offsets.
type span struct{ lo, hi int64 }

// scan reads b, whose first byte is at offset base, from state n. Each
// match is added to spans, merged with the spans it overlaps: matches come
// in order of their end, so only the tail of spans can be touched. It
// returns the state after b.
func (a *automaton) scan(n int32, b []byte, base int64, spans []span) (int32, []span) {
	for i, c := range b {
		n = a.step(n, c)
		o := a.nodes[n].out
		if o == 0 {
			continue
		}
		hi := base + int64(i) + 1
		lo := hi - int64(o)
		for len(spans) > 0 && spans[len(spans)-1].hi > lo {
			lo = min(lo, spans[len(spans)-1].lo)
			spans = spans[:len(spans)-1]
		}
		spans = append(spans, span{lo, hi})
	}
	return n, spans
}

// held is how many bytes at the end of the input read so far may still
// begin a match: the length of the longest suffix that is a proper prefix
// of a pattern (a whole pattern already matched needs nothing more).
func (a *automaton) held(n int32) int { return int(a.nodes[n].keep) }
