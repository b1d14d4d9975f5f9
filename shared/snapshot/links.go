package snapshot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Symlinks are checked twice. CheckSymlink looks at one link alone: its
// target, joined lexically to its directory, must stay in the tree. That is
// not enough: with a/b/up -> .. the link y -> a/b/up/b/up/../../x looks
// inside but, followed as the kernel follows it, leaves the tree. So a
// tree's links are also resolved through each other, component by
// component as the kernel resolves a path, and a tree where one leads out
// is refused.

// maxLinkHops is the kernel's limit on symlinks followed in one lookup;
// a tree that needs more (a loop, say) is refused.
const maxLinkHops = 40

// linkBudget bounds the work of resolving a tree's links (components
// visited, all links together), so a tree made to be slow is refused.
const linkBudget = 4 << 20

// lookupFunc says what is at p, a clean path relative to the tree's root:
// TypeDir, TypeFile, TypeSymlink (with its target), or "" for nothing.
type lookupFunc func(p string) (typ, target string, err error)

// linkResolver follows paths through a tree's links.
type linkResolver struct {
	lookup lookupFunc
	budget int
}

// check resolves p (a link's path) as the kernel would and refuses it if
// the path it reaches leaves the tree.
func (r *linkResolver) check(p string) error {
	var stack []string // the resolved directories, each a full path
	rest := strings.Split(p, "/")
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if r.budget--; r.budget < 0 {
			return refuse("the tree's symlinks take more than %d steps to resolve", linkBudget)
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return refuse("symlink %q leads outside the tree through the tree's other links", p)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		cur := c
		if len(stack) > 0 {
			cur = stack[len(stack)-1] + "/" + c
		}
		typ, target, err := r.lookup(cur)
		if err != nil {
			return err
		}
		switch typ {
		case "", TypeFile:
			// Nothing there, or a file with more to go: the kernel's
			// lookup fails here, inside the tree.
			return nil
		case TypeSymlink:
			if hops++; hops > maxLinkHops {
				return refuse("symlink %q goes through more than %d links (a loop?)", p, maxLinkHops)
			}
			if target == "" || strings.HasPrefix(target, "/") {
				return refuse("symlink %q leads to %q, outside the tree", cur, target)
			}
			rest = append(strings.Split(target, "/"), rest...)
		default:
			stack = append(stack, cur)
		}
	}
	if len(stack) == 0 {
		// As CheckSymlink refuses a link to "." or "a/..": through it,
		// "link/.." is outside.
		return refuse("symlink %q leads to the root of the tree through the tree's other links", p)
	}
	return nil
}

// checkTreeLinks resolves every link of an archive's tree (seen maps each
// path to its type, links each link to its target).
func checkTreeLinks(seen map[string]string, links map[string]string) error {
	r := &linkResolver{budget: linkBudget, lookup: func(p string) (string, string, error) {
		return seen[p], links[p], nil
	}}
	for name := range links {
		if err := r.check(name); err != nil {
			return err
		}
	}
	return nil
}

// CheckLinks walks the tree at dir and refuses it if any symlink in it,
// followed through the tree's other links, leads outside dir. The runner
// calls it on a workspace after merging caches and artifacts into the
// source: each tree was checked alone, but links of two trees together
// can lead out where neither does. Nothing may change the tree meanwhile.
func CheckLinks(dir string) error {
	r := &linkResolver{budget: linkBudget, lookup: func(p string) (string, string, error) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		fi, err := os.Lstat(full)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			return "", "", nil
		case err != nil:
			return "", "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			return TypeSymlink, target, err
		case fi.IsDir():
			return TypeDir, "", nil
		}
		return TypeFile, "", nil
	}}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return r.check(filepath.ToSlash(rel))
	})
}
