package testhosts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// TreeSums maps every path below root (root itself as ".") to what it is:
// its mode and, for a file, its contents' sha256; for a link, its target.
// It goes on past what it cannot read, leaving it out, and returns the
// first such error.
func TreeSums(root string) (map[string]string, error) {
	out := map[string]string{}
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fail(err)
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			fail(err)
			return nil
		}
		v := info.Mode().String()
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				fail(err)
				return nil
			}
			s := sha256.Sum256(b)
			v += " " + hex.EncodeToString(s[:])
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		}
		out[rel] = v
		return nil
	})
	return out, errors.Join(err, first)
}

// TreeChanges lists every difference between two TreeSums of one tree,
// sorted: what appeared, what changed and what was removed.
func TreeChanges(before, after map[string]string) []string {
	var out []string
	for p, v := range after {
		if b, ok := before[p]; !ok {
			out = append(out, fmt.Sprintf("%s appeared (%s)", p, v))
		} else if b != v {
			out = append(out, fmt.Sprintf("%s changed (%s, was %s)", p, v, b))
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			out = append(out, p+" was removed")
		}
	}
	sort.Strings(out)
	return out
}
